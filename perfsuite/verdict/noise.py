"""The noise of one machine by level, and what each verdict can detect on it (``perfsuite calibrate``; serving
cells: perfsuite.orchestrate.serving_calibrate): within a process (its generations), between processes (inside a
run), between runs (what the run values spread beyond the processes' share: drift) and A/A lockstep pairs (log(B/A)
as ``perfsuite ab`` measures it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perfsuite.verdict import sequential, stats


def decompose(values: dict[str, dict[str, list[list[tuple[float, list[float]]]]]], config: Any, workers: int,
              process_wall_s: float, gate_workers: int | None = None, *,
              pairs: dict[str, dict[str, list[float]]] | None = None, pair_wall_s: float = math.nan
              ) -> dict[str, Any]:
    """``workers``: replicates measured per run; ``gate_workers``: those a gated run has (default the same).
    ``pairs``: log(B/A) of A/A lockstep pairs per cell and metric, each ``pair_wall_s`` long; with 3 or more, ab's
    pairs are predicted from their SD (``ab_model`` "lockstep"), else from sqrt(2) x the between-process spread
    ("sequential", also kept as ``ab_sequential``)."""
    gw, r = gate_workers or workers, config.baseline_runs
    out: dict[str, Any] = {"workers": workers, "process_wall_s": process_wall_s, "cells": {}}
    alpha_test = config.alpha / max(sum(len(v) for v in values.values()), 1)  # max: no division when empty
    tau, eps = math.log1p(config.ab_threshold), math.log1p(config.ab_margin)
    for cid, per_metric in values.items():
        out["cells"][cid] = {}
        for m, runs in per_metric.items():
            logs = [np.log([v for v, _ in run]) for run in runs if run]
            within_proc = float(np.median([np.std(np.log(g), ddof=1) for run in runs for _, g in run if len(g) > 1]
                                          or [math.nan]))
            resid = np.concatenate([x - x.mean() for x in logs])
            df_e = sum(x.size - 1 for x in logs)
            s_e = float(math.sqrt((resid**2).sum() / df_e)) if df_e > 0 else math.nan
            means = np.array([x.mean() for x in logs])
            var_means = float(means.var(ddof=1)) if means.size > 1 else math.nan
            s_a = math.sqrt(max(0.0, var_means - s_e**2 / workers)) if math.isfinite(var_means) else math.nan
            thr = math.log1p(next((p.threshold for p in config.policies if p.metric == f"median_{m}_ms"), 0.03))
            se = math.sqrt((s_a**2 + s_e**2 / gw) * (1 + 1 / r))
            mde_gate = stats.mde(se, r - 1, alpha_test, config.power, thr)
            ab_seq = _ab(math.sqrt(2) * s_e, 2 * process_wall_s, config.alpha / 3, tau, eps)
            lock = (pairs or {}).get(cid, {}).get(m) or []
            s_pair = float(np.std(lock, ddof=1)) if len(lock) >= 3 else math.nan
            ab = _ab(s_pair, pair_wall_s, config.alpha / 3, tau, eps) if math.isfinite(s_pair) else ab_seq
            out["cells"][cid][m] = {
                "cv_within_process": math.expm1(within_proc), "cv_between_processes": math.expm1(s_e),
                "cv_between_runs": math.expm1(s_a), "cv_run_value": math.expm1(math.sqrt(var_means))
                if math.isfinite(var_means) else None, "runs": len(logs),
                "gate_mde": math.expm1(mde_gate), "gate_alpha_per_test": alpha_test, "ab": ab,
                "ab_model": "lockstep" if math.isfinite(s_pair) else "sequential", "ab_sequential": ab_seq,
                "lockstep_pairs": len(lock), "sd_log_pair": s_pair if math.isfinite(s_pair) else None,
                "sd_log_pair_sequential": math.sqrt(2) * s_e}
    return out


def _ab(sd_pair: float, pair_s: float, alpha: float, tau: float, eps: float) -> dict[str, dict[str, Any]]:
    """Pairs (and minutes, at ``pair_s`` a pair) ab needs to decide +5 % and +2 % with 80 % power."""
    needed = {f"{pct:.0%}": sequential.pairs_needed(sd_pair, math.log1p(pct), alpha, tau, eps) for pct in (0.05, 0.02)}
    return {k: {"pairs_80pct": n, "minutes_80pct": None if n is None or not math.isfinite(pair_s) else n * pair_s / 60}
            for k, n in needed.items()}


def format_report(rep: dict[str, Any]) -> list[str]:
    lines = [f"noise by level (CV of median per process; {rep['workers']} processes per run, "
             f"{rep['process_wall_s']:.1f} s per process)", f"{'cell / metric':<52} {'within':>7} {'between':>8} "
             f"{'between':>8} {'gate':>7} {'A/A pair':>8}  ab pairs (minutes) to decide",
             f"{'':<52} {'process':>7} {'procs':>8} {'runs':>8} {'MDE':>7} {'SD':>8}  +5 %, +2 %"]
    models = set()
    for cid, per in rep["cells"].items():
        for m, d in per.items():
            ab = "  ".join(f"{k}: " + ("> cap" if v["pairs_80pct"] is None else f"{v['pairs_80pct']}" + (
                "" if v["minutes_80pct"] is None else f" ({v['minutes_80pct']:.1f})")) for k, v in d["ab"].items())
            sd = d.get("sd_log_pair")
            models.add((d.get("ab_model", "sequential"), d.get("lockstep_pairs", 0)))
            lines.append(f"{cid + ' ' + m:<52} {d['cv_within_process']:>7.1%} {d['cv_between_processes']:>8.1%} "
                         f"{d['cv_between_runs']:>8.1%} {d['gate_mde']:>7.1%} "
                         f"{'-' if sd is None else f'{math.expm1(sd):.1%}':>8}  {ab}")
    for model, n in sorted(models):
        lines.append(f"ab predicted from the SD of log(B/A) of {n} A/A lockstep pairs per cell (ab's own pairs)"
                     if model == "lockstep" else "ab predicted from sqrt(2) x the between-process spread "
                     "(sequential pairs; no lockstep pairs measured: --pairs 0, or a serving cell)")
    return lines
