"""Verdicts: one per gated (benchmark, metric). Decision rule, for a statistical metric with relative threshold
``tau`` and per-hypothesis level ``alpha`` (Bonferroni share inside pytest, Holm in ``perfsuite compare``):

* regression:   one-sided test "worse" significant (p < alpha)  AND  estimated change worse than ``tau``
* improvement:  one-sided test "better" significant             AND  estimated change better than ``tau``
* unchanged:    the (1 - 2 alpha) interval lies inside (1/(1+tau), 1+tau)  (equivalence, TOST)
* inconclusive: anything else; ``more_runs`` says how many more runs (pairs) would settle it.

Only "regression" fails. Exact metrics compare values (with an optional tolerance) instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.gate import stats
from perfsuite.gate.policy import _LAT, _STATS, GateConfig, Policy

KINDS = ("regression", "improvement", "unchanged", "inconclusive")


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
    method: str  # runs | runs+prior | within+prior | within-only | paired | exact | missing
    n_baseline: int
    n_current: int
    more_runs: int | None = None  # inconclusive: more current runs (A/B: pairs) that would settle it
    note: str = ""
    baseline_value: float | None = None
    current_value: float | None = None

    @property
    def failed(self) -> bool:
        return self.kind == "regression"

    @property
    def exact(self) -> bool:
        return self.method == "exact"

    def change(self) -> str:
        if self.ratio is None:
            return "n/a"
        return f"{(self.ratio - 1) * 100:+.1f}%"

    def interval(self) -> str:
        if self.ci_low is None or self.ci_high is None:
            return ""
        return f"[{(self.ci_low - 1) * 100:+.1f}%, {(self.ci_high - 1) * 100:+.1f}%]"

    def describe(self) -> str:
        if self.exact:
            return (f"{self.metric}: {self.kind}: {_num(self.current_value)} vs baseline {_num(self.baseline_value)}"
                    + (f" (tolerance {self.threshold:g})" if self.threshold else "") + (f"; {self.note}" if self.note
                                                                                        else ""))
        s = (f"{self.metric}: {self.kind}: {self.change()} (ratio {_num(self.ratio)}, "
             f"{(1 - 2 * self.alpha) * 100:.4g}% CI {self.interval()}, threshold {self.threshold * 100:g}%, "
             f"MDE {_pct(self.mde)}, p={_p(self.p_worse)}, {self.method}, runs {self.n_baseline} vs "
             f"{self.n_current})")
        if self.kind == "inconclusive" and self.more_runs:
            s += f"; about {self.more_runs} more run(s) would settle it"
        if self.note:
            s += f"; {self.note}"
        return s


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.4g}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v)}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v * 100:.1f}%"


def _p(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2g}"


# ------------------------------------------------------------------------------------------------ metric data
def run_value(bench: Mapping[str, Any], metric: str) -> float | None:
    """One run's value of ``metric`` for one benchmark entry (``{"extra_info": ..., "stats": ...}``)."""
    info = bench.get("extra_info") or {}
    m = _STATS.match(metric)
    if m:
        v = (bench.get("stats") or {}).get(m.group(1))
        return float(v) if isinstance(v, (int, float)) else None
    lat = _LAT.match(metric)
    if lat:
        units = (info.get("samples") or {}).get(f"{lat.group(2)}_ms")
        if isinstance(units, list) and units:
            try:
                return stats.statistic([float(u) for u in units], lat.group(1))
            except (TypeError, ValueError):
                return None
    v = info.get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def run_units(bench: Mapping[str, Any], metric: str) -> tuple[list[float], str] | None:
    """Per-generation values behind an aggregate (not ITL: decode steps of one generation are correlated)."""
    lat = _LAT.match(metric)
    if not lat or lat.group(2) == "itl":
        return None
    units = ((bench.get("extra_info") or {}).get("samples") or {}).get(f"{lat.group(2)}_ms")
    if not isinstance(units, list) or len(units) < 3:
        return None
    try:
        return [float(u) for u in units], lat.group(1)
    except (TypeError, ValueError):
        return None


# -------------------------------------------------------------------------------------------------- estimation
@dataclass(frozen=True)
class Cell:
    """What is compared for one (benchmark, metric): the estimate (or why there is none) and raw values."""

    test: str
    policy: Policy
    estimate: stats.Estimate | None
    baseline_values: tuple[float, ...]
    current_values: tuple[float, ...]
    note: str = ""

    @property
    def p_worse(self) -> float | None:
        e = self.estimate
        if e is None or self.policy.exact or e.se <= 0:
            return None if e is None or self.policy.exact else (0.0 if _sign(self.policy) * e.d > 0 else 1.0)
        return stats.t_sf(_sign(self.policy) * e.d / e.se, e.df)


def _sign(policy: Policy) -> float:
    return -1.0 if policy.direction == "higher_is_better" else 1.0


def _positive(values: Sequence[float | None]) -> tuple[float, ...] | None:
    if any(v is None or not math.isfinite(v) or v <= 0 for v in values):
        return None
    return tuple(float(v) for v in values)  # type: ignore[arg-type]


def estimate_cell(test: str, policy: Policy, baseline: Sequence[Mapping[str, Any]],
                  current: Sequence[Mapping[str, Any]], config: GateConfig, *,
                  paired: bool = False) -> Cell:
    """Build the estimate for one metric from baseline run entries and current run entries of one benchmark."""
    bvals = [run_value(b, policy.metric) for b in baseline]
    cvals = [run_value(c, policy.metric) for c in current]
    if policy.exact:
        if any(v is None for v in bvals + cvals) or not bvals or not cvals:
            return Cell(test, policy, None, (), (), f"{policy.metric} missing in a baseline or current run")
        return Cell(test, policy, None, tuple(bvals), tuple(cvals))  # type: ignore[arg-type]
    if not bvals or not cvals:
        return Cell(test, policy, None, (), (), "no baseline run has this benchmark")
    bpos, cpos = _positive(bvals), _positive(cvals)
    if bpos is None or cpos is None:
        return Cell(test, policy, None, (), (), f"{policy.metric} missing or not positive in a run")
    if paired:
        return Cell(test, policy, stats.paired(bpos, cpos), bpos, cpos)
    cv = config.between_run_cv
    prior_sd = math.log1p(cv) if cv is not None else None
    if len(bpos) >= 2:
        cur_units = [run_units(c, policy.metric) for c in current]
        raw_w = [stats.within_run_log_var(u[0], u[1]) for u in cur_units if u is not None]
        wvars = [w for w in raw_w if w is not None]
        within = sum(wvars) / len(wvars) if wvars else None
        est: stats.Estimate | None = stats.between_runs(bpos, cpos, prior_sd=prior_sd, prior_df=config.prior_df,
                                 current_within_var=within)
        return Cell(test, policy, est, bpos, cpos)
    bu, cu = run_units(baseline[0], policy.metric), run_units(current[-1], policy.metric)
    if bu is None or cu is None:
        return Cell(test, policy, None, bpos, cpos, "one baseline run and no per-generation samples: record "
                    "more baseline runs")
    est = stats.within_run(bu[0], cu[0], bu[1], prior_sd=prior_sd, prior_df=config.prior_df)
    if est is None:
        return Cell(test, policy, None, bpos, cpos, "per-generation samples unusable")
    return Cell(test, policy, est, bpos, cpos)


# ---------------------------------------------------------------------------------------------------- decision
def decide(cell: Cell, alpha: float, power: float) -> Verdict:
    pol = cell.policy
    if pol.exact:
        return _decide_exact(cell)
    est = cell.estimate
    common = dict(test=cell.test, metric=pol.metric, threshold=pol.threshold, direction=pol.direction,
                  alpha=alpha)
    if est is None:
        return Verdict(kind="inconclusive", ratio=None, ci_low=None, ci_high=None, mde=None, p_worse=None,
                       method="missing", n_baseline=len(cell.baseline_values), n_current=len(cell.current_values),
                       note=cell.note, **common)  # type: ignore[arg-type]
    sign = _sign(pol)
    dw = sign * est.d  # > 0 means worse
    thr = math.log1p(pol.threshold)
    p_worse = cell.p_worse
    assert p_worse is not None
    p_better = 1.0 - p_worse
    lo, hi = est.ci(alpha)
    wlo, whi = sorted((sign * lo, sign * hi))  # interval of the "worse" shift
    note = cell.note
    if est.method == "within-only":
        kind = "inconclusive"
        note = (note + "; " if note else "") + ("one baseline run: between-run noise unknown; record more "
                                                "baseline runs or set between_run_cv (perfsuite calibrate)")
    elif p_worse < alpha and dw > thr and not _beaten(cell, sign, est.method):
        kind = "regression"
    elif p_better < alpha and dw < -thr:
        kind = "improvement"
    elif -thr < wlo and whi < thr:
        kind = "unchanged"
    else:
        kind = "inconclusive"
    if kind == "inconclusive" and p_worse < alpha and dw > thr:
        note = (note + "; " if note else "") + "a baseline run was as slow as the current run (distribution-free guard)"
    more = None
    if kind == "inconclusive" and est.method != "within-only":
        more = stats.runs_needed(est, alpha, thr, paired_design=est.method == "paired")
        if more is None and not note:
            note = "the estimate sits on the threshold or the baseline is too short: record more baseline runs"
    mde_log = stats.mde(est.se, est.df, alpha, power, thr)
    return Verdict(kind=kind, ratio=math.exp(est.d), ci_low=math.exp(lo), ci_high=math.exp(hi),
                   mde=math.expm1(mde_log), p_worse=p_worse, method=est.method, n_baseline=est.n_baseline,
                   n_current=est.n_current, more_runs=more, note=note,
                   baseline_value=math.exp(sum(math.log(v) for v in cell.baseline_values)
                                           / len(cell.baseline_values)),
                   current_value=math.exp(sum(math.log(v) for v in cell.current_values)
                                          / len(cell.current_values)),
                   **common)  # type: ignore[arg-type]


def _beaten(cell: Cell, sign: float, method: str) -> bool:
    """Distribution-free guard for run comparisons: a regression needs the (lower) median current run to be worse
    than every baseline run. Under exchangeable A/A runs that alone happens with a probability fixed by ranks
    (1/(R+1) for one current run), whatever the shape of the between-run distribution; the t-test's normality
    assumption then cannot turn a heavy-tailed runner into false alarms beyond that bound."""
    if method.startswith("within") or method == "paired" or not cell.baseline_values or not cell.current_values:
        return False
    worst_base = max(sign * math.log(v) for v in cell.baseline_values)
    cur = sorted(sign * math.log(v) for v in cell.current_values)
    return cur[(len(cur) - 1) // 2] <= worst_base  # the (lower) median current run


def _decide_exact(cell: Cell) -> Verdict:
    pol = cell.policy
    common = dict(test=cell.test, metric=pol.metric, threshold=pol.tolerance, direction=pol.direction, alpha=0.0,
                  p_worse=None, mde=None, method="exact", ci_low=None, ci_high=None,
                  n_baseline=len(cell.baseline_values), n_current=len(cell.current_values))
    if not cell.baseline_values or not cell.current_values:
        return Verdict(kind="inconclusive", ratio=None, note=cell.note, **common)  # type: ignore[arg-type]
    b = sorted(cell.baseline_values)
    ref = b[len(b) // 2]  # median baseline run
    cur = cell.current_values[-1] if len(cell.current_values) == 1 else sorted(cell.current_values)[
        len(cell.current_values) // 2]
    slack = max(pol.abs_tolerance, pol.tolerance * abs(ref))
    if pol.direction == "equal":
        kind = "regression" if any(abs(c - ref) > slack for c in cell.current_values) else "unchanged"
    elif pol.direction == "lower_is_better":  # outside the baseline runs' range by more than the slack
        kind = "regression" if cur > b[-1] + slack else ("improvement" if cur < b[0] - slack else "unchanged")
    else:
        kind = "regression" if cur < b[0] - slack else ("improvement" if cur > b[-1] + slack else "unchanged")
    ratio = cur / ref if ref else None
    note = "" if kind != "regression" or pol.direction != "equal" else "exact metric changed"
    return Verdict(kind=kind, ratio=ratio, baseline_value=ref, current_value=cur, note=note,
                   **common)  # type: ignore[arg-type]


def decide_family(cells: Sequence[Cell], alpha: float, power: float, correction: str = "holm") -> list[Verdict]:
    """Decide many cells at once with a family-wise correction: ``holm`` (step-down) or ``bonferroni``."""
    stat_idx = [i for i, c in enumerate(cells) if not c.policy.exact and c.estimate is not None]
    levels: dict[int, float] = {}
    m = len(stat_idx)
    if m:
        if correction == "holm":
            ps = [cells[i].p_worse for i in stat_idx]
            lv = stats.holm_levels([p if p is not None else 1.0 for p in ps], alpha)
            levels = dict(zip(stat_idx, lv, strict=False))
        elif correction == "bonferroni":
            levels = {i: alpha / m for i in stat_idx}
        else:
            raise ValueError(f"correction must be holm or bonferroni, not {correction!r}")
    return [decide(c, levels.get(i, alpha / max(m, 1)), power) for i, c in enumerate(cells)]
