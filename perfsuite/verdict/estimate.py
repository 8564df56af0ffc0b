"""Estimation: from the baseline runs' and the current run's entries of one benchmark to a log-ratio estimate
(or the reason there is none). Which runs count is decided here: only runs measured the same way."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.verdict import stats, values
from perfsuite.verdict.policy import GateConfig, Policy


@dataclass(frozen=True)
class Comparison:
    """What is compared for one (benchmark, metric): the estimate (or why there is none) and the raw values."""

    test: str
    policy: Policy
    estimate: stats.Estimate | None
    baseline_values: tuple[float, ...]  # one per baseline run (exact metrics: the values themselves)
    current_values: tuple[float, ...]
    note: str = ""
    incomparable: str = ""  # why no baseline run was measured the same way

    @property
    def p_worse(self) -> float | None:
        e = self.estimate
        if e is None or self.policy.exact:
            return None
        if e.se <= 0:
            return 0.0 if sign(self.policy) * e.d > 0 else 1.0
        return stats.t_sf(sign(self.policy) * e.d / e.se, e.df)


def sign(policy: Policy) -> float:
    """+1 when larger values are worse (latencies), -1 for throughput."""
    return -1.0 if policy.direction == "higher_is_better" else 1.0


def comparable_runs(current: Mapping[str, Any], baseline: Sequence[Mapping[str, Any]]
                    ) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The baseline entries measured like ``current``, and the differences of the first one that is not."""
    ok = [b for b in baseline if not values.mismatch(current, b)]
    diffs = [] if ok or not baseline else values.mismatch(current, baseline[-1])
    return ok, diffs


def estimate(test: str, policy: Policy, baseline: Sequence[Mapping[str, Any]],
             currents: Sequence[Mapping[str, Any]], config: GateConfig) -> Comparison:
    """Estimate one metric of one benchmark: one entry per baseline run (oldest first), one per current run
    (usually one; ``perfsuite compare`` accepts several)."""
    current = currents[-1]
    base, diffs = comparable_runs(current, baseline)
    if diffs:
        why = "; ".join(diffs)
        return Comparison(test, policy, None, (), (), f"not compared: measured differently ({why}); record "
                          "baselines with this profile and options (--perf-update-baselines)", incomparable=why)
    base, left_out = _finite_runs(config.newest(list(base)), policy.metric)
    comp = _estimate(test, policy, base, currents, config)
    return dataclasses.replace(comp, note="; ".join(x for x in (*left_out, comp.note) if x)) if left_out else comp


def _finite_runs(base: list[Mapping[str, Any]], metric: str) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The baseline runs whose values of ``metric`` are finite, and a note naming each one left out."""
    whys = [values.nonfinite(b, metric) for b in base]
    return ([b for b, why in zip(base, whys, strict=True) if not why],
            [f"left out {b.get('_path') or 'a baseline run'} for {metric}: {why}"
             for b, why in zip(base, whys, strict=True) if why])


def _estimate(test: str, policy: Policy, base: Sequence[Mapping[str, Any]], currents: Sequence[Mapping[str, Any]],
              config: GateConfig) -> Comparison:
    current = currents[-1]
    bvals = [values.run_value(b, policy.metric) for b in base]
    cvals = [values.run_value(c, policy.metric) for c in currents]
    if policy.exact:
        if any(v is None for v in bvals + cvals) or not bvals:
            return Comparison(test, policy, None, (), (), f"{policy.metric} missing in a baseline or current run")
        return Comparison(test, policy, None, tuple(bvals), tuple(cvals))  # type: ignore[arg-type]
    if not bvals:
        return Comparison(test, policy, None, (), (), "no baseline run has this benchmark")
    if any(v is None or not math.isfinite(v) or v <= 0 for v in bvals + cvals):
        return Comparison(test, policy, None, (), (), f"{policy.metric} missing or not positive in a run")
    bpos = tuple(float(v) for v in bvals)  # type: ignore[arg-type]
    cpos = tuple(float(v) for v in cvals)  # type: ignore[arg-type]
    if len(bpos) >= 2:
        within = values.within_run_var(current, policy.metric) if len(cpos) == 1 else None
        floor = math.log1p(config.min_run_cv) if config.min_run_cv else None
        return Comparison(test, policy, stats.between_runs(bpos, cpos, current_within_var=within, min_sd=floor),
                          bpos, cpos)
    bp, cp = values.process_values(base[0], policy.metric), values.process_values(current, policy.metric)
    if not bp or not cp or len(bp) < 2 or len(cp) < 2:
        return Comparison(test, policy, None, bpos, cpos, "one baseline run and too few processes to say "
                          "anything: record more baseline runs")
    return Comparison(test, policy, stats.processes(bp, cp), bpos, cpos)
