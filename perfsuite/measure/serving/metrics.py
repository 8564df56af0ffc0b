"""Serving metrics as ``vllm bench serve`` defines and names them (vllm/benchmarks/serve.py, calculate_metrics;
docs/serving.md, "Metrics"): TTFT and E2EL from the send to the first and last chunk with a choice; TPOT per request
``(e2el - ttft) / (output_tokens - 1)`` for requests of more than one output token (0 for goodput); ITL per chunk,
pooled; output tokens from the server's usage (else the chunk count); throughputs over the timed phase; numpy's
linear percentiles. Beyond vLLM's: the client's own cost (dispatch delay, queue wait, CPU share) and the failures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from perfsuite.measure.serving.load import LoadResult, Record

SLO_KEYS = ("ttft", "tpot", "e2el")
LATENCIES = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (90, 99)


def parse_goodput(items: str | Iterable[str]) -> dict[str, float]:
    """``"ttft:200 tpot:50"`` or ``["ttft:200", "tpot:50"]`` -> ``{"ttft": 200.0, "tpot": 50.0}`` (milliseconds)."""
    parts = items.replace(",", " ").split() if isinstance(items, str) else [p for i in items for p in i.split()]
    out: dict[str, float] = {}
    for p in parts:
        key, _, val = p.partition(":")
        try:
            ms = float(val)
        except ValueError:
            ms = -1.0
        if key not in SLO_KEYS or not ms > 0:
            raise ValueError(f"goodput SLO {p!r}: write NAME:MILLISECONDS with NAME one of {', '.join(SLO_KEYS)} and "
                             "a positive number, e.g. ttft:200 tpot:50")
        out[key] = ms
    return out


def output_tokens(r: Record) -> int:
    return int(r.output_tokens) if r.output_tokens else 1 + len(r.itl_s)


def tpot_s(r: Record) -> float | None:
    n = output_tokens(r)
    return (r.latency_s - r.ttft_s) / (n - 1) if n > 1 else None


def samples_ms(records: Iterable[Record]) -> dict[str, list[float]]:
    """Per-request values in ms (ITL: per chunk), successful requests only: what the gate's statistics read."""
    ok = [r for r in records if r.success]
    tp = [t for r in ok if (t := tpot_s(r)) is not None]
    return {"ttft_ms": [r.ttft_s * 1e3 for r in ok], "tpot_ms": [t * 1e3 for t in tp],
            "itl_ms": [x * 1e3 for r in ok for x in r.itl_s], "e2el_ms": [r.latency_s * 1e3 for r in ok]}


def _stats(name: str, values_ms: list[float]) -> dict[str, float]:
    v = np.asarray(values_ms or [0.0], dtype=float)
    out = {f"mean_{name}_ms": float(v.mean()), f"median_{name}_ms": float(np.median(v)),
           f"std_{name}_ms": float(v.std())}
    out.update({f"p{p}_{name}_ms": float(np.percentile(v, p)) for p in PERCENTILES})
    return out


def goodput_count(records: Iterable[Record], slos_ms: Mapping[str, float]) -> int:
    good = 0
    for r in records:
        if r.success:
            vals = {"ttft": r.ttft_s, "tpot": tpot_s(r) or 0.0, "e2el": r.latency_s}
            good += all(vals[k] * 1e3 <= ms for k, ms in slos_ms.items())
    return good


def compute(result: LoadResult, slos_ms: Mapping[str, float] | None = None) -> dict[str, Any]:
    recs = result.records
    ok = [r for r in recs if r.success]
    dur = result.duration_s
    n_in = sum(r.prompt_len for r in ok)
    n_out = sum(output_tokens(r) for r in ok)
    out: dict[str, Any] = {"completed": len(ok), "failed": len(recs) - len(ok), "num_prompts": len(recs),
                           "duration": dur, "total_input_tokens": n_in, "total_output_tokens": n_out,
                           "request_throughput": len(ok) / dur if dur > 0 else 0.0,
                           "output_throughput": n_out / dur if dur > 0 else 0.0,
                           "total_token_throughput": (n_in + n_out) / dur if dur > 0 else 0.0}
    if slos_ms:
        out["request_goodput"] = goodput_count(recs, slos_ms) / dur if dur > 0 else 0.0
        out["goodput_slos_ms"] = dict(slos_ms)
    for name, vals in samples_ms(recs).items():
        out.update(_stats(name[:-3], vals))
    sent = [r for r in recs if r.sent_s > 0 or r.success]
    out.update(_stats("dispatch_delay", [r.dispatch_delay_s * 1e3 for r in sent]))
    out["max_dispatch_delay_ms"] = max((r.dispatch_delay_s * 1e3 for r in sent), default=0.0)
    out.update(_stats("queue_wait", [r.queue_s * 1e3 for r in sent]))
    out["client_cpu_share"] = result.client_cpu_s / dur if dur > 0 else 0.0  # CPU s per wall s: 1.0 = one core busy
    out["errors"] = dict(Counter(r.error[:120] for r in recs if not r.success))
    return out


def failure(metrics: Mapping[str, Any], max_failed_fraction: float) -> str | None:
    """Why this load point must fail: failed requests above the threshold, or nothing completed."""
    n, failed = int(metrics["num_prompts"]), int(metrics["failed"])
    if metrics["completed"] == 0 or failed > max_failed_fraction * n:
        top = ", ".join(f"{k} (x{v})" for k, v in list(metrics.get("errors", {}).items())[:3])
        return (f"{failed} of {n} requests failed (threshold {max_failed_fraction:.0%}): {top or 'no error text'}")
    return None
