"""The one vocabulary of metric names, in vLLM's spelling (``vllm bench serve``: ``median_ttft_ms``, ``p99_itl_ms``,
...), with their units, which way is better and which ``extra_info["samples"]`` key holds their per-unit values.
Latency bases (milliseconds):

* ``ttft``: time to first token — the prefill, until the first tokens are on the host.
* ``tpot``: time per output token after the first — per generation (e2el - ttft) / (n - 1); for ``test_tpot``, the
  mean decode call of the generation.
* ``itl``: inter-token latency — one value per token after the first (per chunk, when serving).
* ``e2el``: end-to-end latency — one value per generation / request.

Throughputs (tokens per second): ``output_throughput_tokens_per_s`` (vLLM's ``output_throughput`` per stream: batch x
new tokens / mean e2el; only ``test_e2el``), ``decode_throughput_tokens_per_s`` (batch / mean TPOT; ``test_tpot``,
which before 2026-12-01 stored it as output throughput), ``prefill_throughput_tokens_per_s`` (prompt tokens over
TTFT; ``test_ttft`` and ``test_e2el``). Serving cells add ``vllm bench serve``'s run-level keys
(:data:`SERVING_THROUGHPUT`, ``completed``, ``failed``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# the tests of an offline cell and the latency base each one is about (tests/perf/test_latency.py: test_<name>)
TIMED = ("ttft", "tpot", "e2el")
# every latency base that has per-unit samples (``<base>_ms``)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
SUMMARIES = ("mean", "median", "p90", "p99")  # what measure writes for each base (vLLM's default percentiles)
STATISTICS = ("mean", "median", "min", "p1..p99")  # what a gate policy may name

OUTPUT_THROUGHPUT = "output_throughput_tokens_per_s"
DECODE_THROUGHPUT = "decode_throughput_tokens_per_s"
PREFILL_THROUGHPUT = "prefill_throughput_tokens_per_s"
THROUGHPUT = (OUTPUT_THROUGHPUT, DECODE_THROUGHPUT, PREFILL_THROUGHPUT)

EXACT = ("generated_tokens", "peak_rss_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
         "peak_device_used_bytes", "peak_device_delta_bytes")

# vllm bench serve's own keys, as its --save-result JSON spells them
SERVING_THROUGHPUT = ("request_throughput", "request_goodput", "output_throughput", "total_token_throughput")

LATENCY_NAME = re.compile(rf"^(mean|median|min|p[1-9][0-9]?)_({'|'.join(LATENCIES)})_ms$")
# what a stored run may hold per latency base: the summaries above, min (a gate statistic) and serving's std
_STORED_LATENCY = re.compile(rf"^(mean|median|min|std|p[0-9]{{1,2}})_({'|'.join(LATENCIES)})_ms$")


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # ms | tokens/s | tokens | bytes
    direction: str  # lower_is_better | higher_is_better | equal
    sample_key: str | None = None  # extra_info["samples"] key of its per-unit values


def sample_key(name: str) -> str | None:
    """``median_tpot_ms`` -> ``tpot_ms``; None for a name that is not a latency summary."""
    m = LATENCY_NAME.match(name)
    return f"{m.group(2)}_ms" if m else None


def describe(name: str) -> Metric | None:
    """What the vocabulary knows about ``name``; None for a name it does not own."""
    if m := LATENCY_NAME.match(name):
        return Metric(name, "ms", "lower_is_better", f"{m.group(2)}_ms")
    if name in THROUGHPUT:
        return Metric(name, "tokens/s", "higher_is_better")
    if name == "generated_tokens":
        return Metric(name, "tokens", "equal")
    if name in EXACT:
        return Metric(name, "bytes", "lower_is_better")
    return None


def is_measurement(key: str) -> bool:
    """Whether an ``extra_info`` key is a measured value of this vocabulary (history stores exactly these): a
    latency summary of a known base, a throughput or an exact count."""
    return bool(_STORED_LATENCY.match(key)) or key in THROUGHPUT or key in EXACT


def policy_help() -> str:
    """The metric names a gate policy may name, as one phrase for error messages."""
    return (f"{{{','.join(STATISTICS[:3])},p<1-99>}}_{{{','.join(LATENCIES)}}}_ms, {', '.join(THROUGHPUT)}, "
            f"{', '.join(EXACT)} (the device-level peak_device_* are GPU-only; give them a tolerance), "
            "stats.{min,max,mean,median} (pytest-benchmark's per-round statistics)")


def pct(x: object, *, signed: bool = True, digits: int = 1, missing: str = "n/a") -> str:
    """A relative change as every table and message writes it: ``+9.4%``; ``missing`` for None, NaN and non-numbers."""
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
        return missing
    return f"{x * 100:{'+' if signed else ''}.{digits}f}%"


def num_cell(v: object, fmt: str = ".3g") -> str:
    """A number as a table cell; a dash where there is none."""
    return format(v, fmt) if isinstance(v, (int, float)) else "—"
