"""Latency summaries with vLLM's metric names (``mean_ttft_ms``, ``median_tpot_ms``, ``p99_itl_ms`` ...)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


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
    return {
        f"mean_{name}_ms": sum(values_ms) / len(values_ms),
        f"median_{name}_ms": percentile(values_ms, 50),
        f"p90_{name}_ms": percentile(values_ms, 90),
        f"p99_{name}_ms": percentile(values_ms, 99),
    }


def tpot_ms(e2el_ms: float, ttft_ms: float, new_tokens: int) -> float:
    """vLLM's TPOT of one request: time after the first token divided by the tokens after it."""
    return (e2el_ms - ttft_ms) / (new_tokens - 1)
