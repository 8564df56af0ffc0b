"""Latency summaries with vLLM's metric names (``mean_ttft_ms``, ``median_tpot_ms``, ``p99_itl_ms`` ...), and the record
of a test's generated tokens that the outputs guard compares (perfsuite.verdict.outputs)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfsuite.facts import vocabulary


def percentile(values: Sequence[float], q: float) -> float:
    """``np.percentile`` with its default method (linear interpolation between closest ranks), which vLLM's
    ``bench serve`` reports; NaN for no values."""
    if len(values) == 0:
        return math.nan
    return float(np.percentile(values, q))


def summarize(name: str, values_ms: Sequence[float]) -> dict[str, float]:
    """``{mean,median,p90,p99}_<name>_ms`` for one metric (ttft, tpot, itl, e2el)."""
    if not values_ms:
        return {}
    return {f"mean_{name}_ms": sum(values_ms) / len(values_ms),
            **{f"{stat}_{name}_ms": percentile(values_ms, q) for stat, q in (("median", 50), ("p90", 90), ("p99", 99))}}


def aggregates(samples: Mapping[str, Sequence[float]], scenario: Any) -> dict[str, float]:
    """What a test's ``extra_info`` summarizes from its per-unit ``samples`` (``ttft_ms``, ``tpot_ms``, ...): vLLM's
    summaries of every latency base sampled, and the throughputs of a ``scenario`` (perfsuite.facts.cells.Scenario; its
    batch size, prompt and new tokens), as perfsuite.facts.vocabulary names them."""
    out: dict[str, float] = {}
    for name in vocabulary.LATENCIES:
        out.update(summarize(name, samples.get(f"{name}_ms", [])))
    sc = scenario
    if "e2el_ms" in samples:
        out[vocabulary.OUTPUT_THROUGHPUT] = sc.batch_size * sc.new_tokens / (out["mean_e2el_ms"] / 1e3)
    if "ttft_ms" in samples:
        out[vocabulary.PREFILL_THROUGHPUT] = sc.batch_size * sc.prompt_tokens / (out["mean_ttft_ms"] / 1e3)
    if "tpot_ms" in samples and "e2el_ms" not in samples:
        out[vocabulary.DECODE_THROUGHPUT] = sc.batch_size / (out["mean_tpot_ms"] / 1e3)
    return out


def tpot_ms(e2el_ms: float, ttft_ms: float, new_tokens: int) -> float:
    """vLLM's TPOT of one request: time after the first token divided by the tokens after it."""
    return (e2el_ms - ttft_ms) / (new_tokens - 1)


def token_digest(tokens: Sequence[Sequence[int]]) -> str:
    """16 hex digits of one generation's tokens, all prompts in order."""
    return hashlib.sha256(json.dumps([list(map(int, t)) for t in tokens]).encode()).hexdigest()[:16]


def outputs_record(generations: Sequence[Sequence[Sequence[int]]]) -> dict[str, Any]:
    """``extra_info["outputs"]`` of one process: each generation's digest and the first generation's tokens."""
    digests = [token_digest(g) for g in generations]
    return {"digests": digests, "tokens": [list(map(int, t)) for t in generations[0]] if generations else [],
            "agree": len(set(digests)) <= 1}


def outputs_merge(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One test's outputs over its worker processes: every process's digests, the first process's tokens."""
    records = [r for r in records if r]
    digests = sorted({d for r in records for d in r.get("digests", [])})
    return {"digests": digests, "tokens": records[0].get("tokens", []) if records else [], "agree": len(digests) <= 1}
