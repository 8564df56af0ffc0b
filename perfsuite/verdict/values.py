"""Extraction: the numbers the gate compares, read from pytest-benchmark entries written by perfsuite. A run's value
of a latency metric is the trimmed geometric mean of its worker processes' values (docs/gate.md, step 1); files from
before process replication have one process."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfsuite.facts import model_identity
from perfsuite.verdict import stats
from perfsuite.verdict.policy import _LAT, _STATS

# How a cell is measured: the two sides of an A/B must agree on these (abloop.same_cells) ...
MEASURED_ALIKE = ("generations", "warmup_generations", "options_hash")
# ... and two runs the gate compares on these too (extra_info["measured_by"]). Its "mode" and "loop" are not compared:
# the loop change moved TTFT below every threshold (perfsuite.orchestrate.plan.measured_by) and the committed
# baselines predate the key.
COMPARABLE = ("profile", *MEASURED_ALIKE, "worker_processes")


def short_name(fullname: str) -> str:
    return fullname.split("::")[-1]


def cell_id(bench: Mapping[str, Any]) -> str:
    cell = (bench.get("extra_info") or {}).get("cell") or {}
    return str(cell.get("id") or "")


def _sample_groups(bench: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The samples of each worker process; old files (no ``processes``) count as one process with the run's."""
    info = bench.get("extra_info") or {}
    procs = info.get("processes")
    return [p.get("samples") or {} for p in procs] if isinstance(procs, list) and procs else [info.get("samples") or {}]


def process_values(bench: Mapping[str, Any], metric: str) -> list[float] | None:
    """One value per worker process for a latency aggregate (``median_tpot_ms`` ...); None for other metrics or
    when absent."""
    lat = _LAT.match(metric)
    if not lat:
        return None
    out = []
    for g in _sample_groups(bench):
        units = g.get(f"{lat.group(2)}_ms")
        try:
            v = stats.statistic([float(u) for u in units], lat.group(1)) if isinstance(units, list) and units else 0.0
        except (TypeError, ValueError):
            return None
        if not (math.isfinite(v) and v > 0):
            return None
        out.append(v)
    return out


def nonfinite(bench: Mapping[str, Any], metric: str) -> str:
    """Why this entry's values of ``metric`` cannot be used ("non-finite value(s) ..."), or "" when they can: a NaN
    or an infinity among the samples behind a latency aggregate, or a non-finite scalar."""
    lat = _LAT.match(metric)
    if lat:
        key = f"{lat.group(2)}_ms"
        groups = _sample_groups(bench)
        bad = [sum(not _finite(u) for u in g.get(key) or []) for g in groups]
        if any(bad):
            return (f"non-finite value(s) in its {key} samples ({sum(bad)} in {sum(n > 0 for n in bad)} of "
                    f"{len(groups)} process(es))")
        return ""
    v = run_value(bench, metric)
    return "" if v is None or math.isfinite(v) else f"non-finite value {v}"


def _finite(u: Any) -> bool:
    try:
        return math.isfinite(float(u))
    except (TypeError, ValueError):
        return True  # not a number at all: process_values reports it as missing


def _trim(n: int) -> int:
    """Values cut from each end of a run's sorted log process values: one from five processes on."""
    return 1 if n >= 5 else 0


def trimmed_log_mean(values: Sequence[float]) -> float:
    x = np.sort(np.log(np.asarray(values, dtype=float)))
    k = _trim(x.size)
    return float(x[k:x.size - k].mean())


def run_value(bench: Mapping[str, Any], metric: str) -> float | None:
    """One run's value of ``metric`` for one benchmark entry (``{"extra_info": ..., "stats": ...}``)."""
    pv = process_values(bench, metric)
    if pv is not None:
        return math.exp(trimmed_log_mean(pv))
    m = _STATS.match(metric)
    if m:
        v = (bench.get("stats") or {}).get(m.group(1))
        return float(v) if isinstance(v, (int, float)) else None
    if _LAT.match(metric):
        return None
    v = (bench.get("extra_info") or {}).get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def within_run_var(bench: Mapping[str, Any], metric: str) -> float | None:
    """Variance of the run value's log (the trimmed log mean) from its own processes, as Yuen's trimmed-mean t
    estimates it (Wilcox, *Introduction to Robust Estimation*, 3.6): the winsorized variance over ``(1 - 2g)^2 n``.
    One stalled process (a co-runner preempting its threads: 4.7 ms against 1.0 ms) then no longer inflates the
    run's uncertainty by itself, as the plain variance did (MDE +95 % on such a run of 10 processes)."""
    pv = process_values(bench, metric)
    if pv is None or len(pv) < 3:
        return None
    x = np.sort(np.log(np.asarray(pv, dtype=float)))
    n, k = x.size, _trim(x.size)
    if k:
        x[:k], x[n - k:] = x[k], x[n - k - 1]
    return float(np.var(x, ddof=1) / (n * (1 - 2 * k / n) ** 2))


def mismatch(current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """How the two were measured differently (``["generations 20 vs 5", ...]``); empty when comparable."""
    cur, base = ((b.get("extra_info") or {}).get("measured_by") or {} for b in (current, baseline))
    if not base and cur:
        return ["baseline recorded before process replication (no measured_by)"]
    out = [f"{k} {cur.get(k)} vs {base.get(k)}" for k in COMPARABLE if cur.get(k) != base.get(k)]
    return out + model_identity.mismatch(current, baseline)  # measured_by["model"]: which model was measured
