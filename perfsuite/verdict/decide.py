"""Decision: one verdict per gated (benchmark, metric), at a per-hypothesis level ``alpha`` (Bonferroni share inside
pytest, Holm in ``perfsuite compare``); docs/gate.md, "Decide", has the table of verdicts. Only "regression" fails.
Exact metrics compare values (with an optional tolerance) instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from perfsuite.verdict import stats
from perfsuite.verdict.estimate import Comparison, sign

KINDS = ("regression", "improvement", "unchanged", "inconclusive", "incomparable")


@dataclass(frozen=True)
class Verdict:
    test: str
    metric: str
    kind: str  # one of KINDS
    ratio: float | None  # current / baseline (as measured: > 1 is slower for latencies)
    ci_low: float | None  # interval of the ratio at level 1 - 2*alpha (its bound is the one-sided test's)
    ci_high: float | None
    mde: float | None  # minimum detectable relative change (worse) at the observed noise and `power`
    threshold: float  # relative threshold (statistical) or tolerance (exact)
    direction: str
    alpha: float  # level this verdict was decided at (after the multiplicity correction)
    p_worse: float | None  # one-sided p-value of "current is worse"
    method: str  # runs | runs+floor (min_run_cv) | processes | exact | missing | incomparable
    n_baseline: int
    n_current: int
    note: str = ""
    baseline_value: float | None = None
    current_value: float | None = None
    s_unit: float | None = None  # log-scale SD of one unit (run), to size an A/B that would settle it

    @property
    def failed(self) -> bool:
        return self.kind == "regression"

    @property
    def exact(self) -> bool:
        return self.method == "exact"

    def change(self) -> str:
        return "n/a" if self.ratio is None else f"{(self.ratio - 1) * 100:+.1f}%"

    def interval(self) -> str:
        if self.ci_low is None or self.ci_high is None:
            return ""
        return f"[{(self.ci_low - 1) * 100:+.1f}%, {(self.ci_high - 1) * 100:+.1f}%]"


def verdicts_json(verdicts: Sequence[Verdict]) -> str:
    """The ``--perf-gate-json`` and ``perfsuite compare --json`` file: one object per verdict."""
    return json.dumps([asdict(v) for v in verdicts], indent=1)


def guard_blocks(comp: Comparison) -> bool:
    """The rank guard: True when it *blocks* a regression, i.e. the current run is not worse than every baseline
    run. It is a necessary condition, not what sets the false-alarm rate: alone it would pass one A/A run in
    R + 1 (9 % for R = 10). It stops a t-test on a heavy-tailed baseline from failing a run that lies inside the
    baseline's own range."""
    if comp.estimate is None or not comp.estimate.method.startswith("runs") or not comp.baseline_values:
        return False
    s = sign(comp.policy)
    worst_base = max(s * math.log(v) for v in comp.baseline_values)
    cur = sorted(s * math.log(v) for v in comp.current_values)
    return cur[(len(cur) - 1) // 2] <= worst_base


def _verdict(comp: Comparison, kind: str | None, alpha: float, threshold: float, method: str, **known: Any
             ) -> Verdict:
    """A verdict of ``comp``; the numbers not ``known`` are unknown. ``kind`` None: nothing was compared."""
    if kind is None:
        kind, method = ("incomparable", "incomparable") if comp.incomparable else ("inconclusive", method)
    unknown = dict(ratio=None, ci_low=None, ci_high=None, mde=None, p_worse=None, note=comp.note,
                   n_baseline=len(comp.baseline_values), n_current=len(comp.current_values))
    return Verdict(test=comp.test, metric=comp.policy.metric, kind=kind, threshold=threshold,
                   direction=comp.policy.direction, alpha=alpha, method=method, **{**unknown, **known})


def decide(comp: Comparison, alpha: float, power: float) -> Verdict:
    pol = comp.policy
    if pol.exact:
        return _decide_exact(comp)
    est = comp.estimate
    if est is None:
        return _verdict(comp, None, alpha, pol.threshold, "missing")
    s = sign(pol)
    worse = s * est.d  # > 0 means worse
    thr = math.log1p(pol.threshold)
    p_worse = comp.p_worse
    assert p_worse is not None
    lo, hi = est.ci(alpha)
    wlo, whi = sorted((s * lo, s * hi))  # interval of the "worse" shift
    note = comp.note
    significant_regression = p_worse < alpha and worse > thr
    if est.method == "processes":
        note = _join(note, "one baseline run: compared process by process, run-to-run drift unknown; record more "
                           "baseline runs before this can fail")
    if significant_regression and est.method == "processes":
        kind = "inconclusive"
    elif significant_regression and guard_blocks(comp):
        kind = "inconclusive"
        note = _join(note, "a baseline run was as slow as the current run (rank guard)")
    elif significant_regression:
        kind = "regression"
    elif 1 - p_worse < alpha and worse < -thr:
        kind = "improvement"
    elif -thr < wlo and whi < thr:
        kind = "unchanged"
    else:
        kind = "inconclusive"
    return _verdict(comp, kind, alpha, pol.threshold, est.method, ratio=math.exp(est.d), ci_low=math.exp(lo),
                    ci_high=math.exp(hi), mde=math.expm1(stats.mde(est.se, est.df, alpha, power, thr)),
                    p_worse=p_worse, n_baseline=est.n_baseline, n_current=est.n_current, note=note,
                    baseline_value=_geomean(comp.baseline_values), current_value=_geomean(comp.current_values),
                    s_unit=est.s_unit)


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def _geomean(v: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def _decide_exact(comp: Comparison) -> Verdict:
    pol = comp.policy
    if not comp.baseline_values or not comp.current_values:
        return _verdict(comp, None, 0.0, pol.tolerance, "exact")
    b = sorted(comp.baseline_values)
    ref = b[len(b) // 2]  # median baseline run
    cur = sorted(comp.current_values)[(len(comp.current_values) - 1) // 2]
    slack = max(pol.abs_tolerance, pol.tolerance * abs(ref))
    if pol.direction == "equal":
        kind = "regression" if any(abs(c - ref) > slack for c in comp.current_values) else "unchanged"
    elif pol.direction == "lower_is_better":  # outside the baseline runs' range by more than the slack
        kind = "regression" if cur > b[-1] + slack else ("improvement" if cur < b[0] - slack else "unchanged")
    else:
        kind = "regression" if cur < b[0] - slack else ("improvement" if cur > b[-1] + slack else "unchanged")
    note = "exact metric changed" if kind == "regression" and pol.direction == "equal" else ""
    return _verdict(comp, kind, 0.0, pol.tolerance, "exact", ratio=cur / ref if ref else None, baseline_value=ref,
                    current_value=cur, note=note)


def decide_all(comps: Sequence[Comparison], alpha: float, power: float, correction: str = "holm") -> list[Verdict]:
    """Decide many comparisons at once with a family-wise correction over the statistical ones that have an
    estimate: ``holm`` (step-down) or ``bonferroni``."""
    stat_idx = [i for i, c in enumerate(comps) if not c.policy.exact and c.estimate is not None]
    m = len(stat_idx)
    if m and correction not in ("holm", "bonferroni"):
        raise ValueError(f"correction must be holm or bonferroni, not {correction!r}")
    ps = [p if p is not None else 1.0 for p in (comps[i].p_worse for i in stat_idx)]
    levels = dict(zip(stat_idx, stats.holm_levels(ps, alpha), strict=True)) if correction == "holm" else {}
    return [decide(c, levels.get(i, alpha / max(m, 1)), power) for i, c in enumerate(comps)]
