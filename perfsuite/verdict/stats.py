"""The statistics of the gate: pure functions on numbers.

Everything works on the log scale: ``d = log(current) - log(baseline)`` makes "5 % slower" the same shift at every
latency, and run-to-run noise of latencies is closer to multiplicative than additive. The unit is a *process*: the
decode steps of one generation share a KV cache, a context length and a moment of the machine, and the generations
of one process share its memory placement and threads, so neither is independent. A run is W processes; baselines
are R runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as st
from scipy.optimize import brentq

from perfsuite.facts.vocabulary import STATISTICS


def statistic(values: Sequence[float], name: str) -> float:
    """One process's aggregate of its per-unit values (``p90``/``p99`` interpolate like numpy/vLLM)."""
    x = np.asarray(values, dtype=float)
    if name in ("mean", "median", "min"):
        return float(getattr(np, name)(x))
    if name.startswith("p") and name[1:].isdigit() and 0 < int(name[1:]) < 100:
        return float(np.percentile(x, float(name[1:])))
    raise ValueError(f"unknown statistic {name!r}; allowed: {', '.join(STATISTICS)}")


@dataclass(frozen=True)
class Estimate:
    """A log-ratio estimate with its standard error and degrees of freedom (t distribution)."""

    d: float  # log(current / baseline), oriented as measured (not by direction)
    se: float
    df: float
    method: str  # runs | processes
    n_baseline: int  # runs (processes for the one-baseline-run method)
    n_current: int
    s_unit: float  # SD of one unit on the log scale

    def ci(self, level_alpha: float) -> tuple[float, float]:
        """Two-sided interval whose lower (upper) bound is the one-sided ``level_alpha`` test's bound."""
        q = t_quantile(1 - level_alpha, self.df)
        return self.d - q * self.se, self.d + q * self.se


def _normal(df: float) -> bool:
    """Student's t at an infinite (or past 1e6) ``df`` is the normal. (Calls pass ``df`` to ``st.t``'s methods: a frozen
    ``st.t(df)`` formats its docstring on every construction, ~0.1 ms, which the MDE's root search pays thousands of
    times per run.)"""
    return not math.isfinite(df) or df > 1e6


def t_quantile(p: float, df: float) -> float:
    return float(st.norm.ppf(p) if _normal(df) else st.t.ppf(p, df))


def t_sf(x: float, df: float) -> float:
    return float(st.norm.sf(x) if _normal(df) else st.t.sf(x, df))


def between_runs(baseline: Sequence[float], current: Sequence[float], *,
                 current_within_var: float | None = None, min_sd: float | None = None) -> Estimate:
    """Run-level comparison (``baseline``: R >= 2 run values, ``current``: C >= 1), docs/gate.md step 3. With C >= 2
    the two spreads are pooled (Student's two-sample t, df = R + C - 2); with C = 1 it is the t prediction interval of
    one new run (df = R - 1). ``current_within_var``: the current run's own variance, used for it when larger;
    ``min_sd``: a floor for the SD of one run's log value (``min_run_cv``).
    """
    y = np.log(np.asarray(baseline, dtype=float))
    z = np.log(np.asarray(current, dtype=float))
    r, c = y.size, z.size
    if r < 2 or c < 1:
        raise ValueError("between_runs needs >= 2 baseline runs and >= 1 current run")
    ss = float(((y - y.mean()) ** 2).sum()) + (float(((z - z.mean()) ** 2).sum()) if c > 1 else 0.0)
    df = float(r - 1 + (c - 1 if c > 1 else 0))
    s2 = ss / df
    method = "runs"
    if min_sd is not None and min_sd**2 > s2:
        s2, method = min_sd**2, "runs+floor"
    s2_cur = max(s2, current_within_var) if current_within_var is not None else s2
    se = math.sqrt(s2 / r + s2_cur / c)
    return Estimate(float(z.mean() - y.mean()), se, df, method, r, c, math.sqrt(s2))


def processes(baseline: Sequence[float], current: Sequence[float]) -> Estimate:
    """One baseline run: its processes against the current run's (Welch t on log process values). It cannot see
    drift between runs, which one baseline run does not show; callers never fail a test on it."""
    y = np.log(np.asarray(baseline, dtype=float))
    z = np.log(np.asarray(current, dtype=float))
    if y.size < 2 or z.size < 2:
        raise ValueError("processes needs >= 2 processes on each side")
    vb, vc = float(y.var(ddof=1)) / y.size, float(z.var(ddof=1)) / z.size
    se = math.sqrt(vb + vc)
    # Welch-Satterthwaite degrees of freedom; with no spread on either side (which scipy answers with NaN and a
    # warning) the pooled df n_b + n_c - 2
    df = float(st.ttest_ind(z, y, equal_var=False).df) if vb + vc > 0 else float(y.size + z.size - 2)
    return Estimate(float(z.mean() - y.mean()), se, df, "processes", int(y.size), int(z.size), se)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (controls the family-wise error rate, uniformly beats Bonferroni): the
    running maximum of ``min(1, (m - rank) * p)`` in ascending order of p."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    adj = np.empty(p.size)
    adj[order] = np.fmax.accumulate(np.fmin(1.0, (p.size - np.arange(p.size)) * p[order]))
    return [float(v) for v in adj]


def holm_adjusted(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values aligned with the input; ``None`` entries (exact metrics) stay ``None``."""
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    adjusted = dict(zip(idx, holm([float(pvalues[i]) for i in idx]), strict=True))  # type: ignore[arg-type]
    return [adjusted.get(i) for i in range(len(pvalues))]


def holm_levels(pvalues: Sequence[float], alpha: float) -> list[float]:
    """Per-hypothesis significance levels that make single-test decisions equal Holm's.

    Hypothesis of rank i (0-based, ascending p) gets ``alpha / (m - min(i, i0))`` where i0 is the first rank
    Holm does not reject; so ``p < level`` iff Holm rejects, and intervals can be drawn at that level.
    """
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    order = np.argsort(p, kind="stable")
    levels = [0.0] * m
    stop = next((rank for rank, i in enumerate(order) if p[i] >= alpha / (m - rank)), m)
    for rank, i in enumerate(order):
        levels[int(i)] = alpha / (m - min(rank, stop))
    return levels


def power_at(delta: float, se: float, df: float, alpha: float, threshold_log: float, points: int = 400) -> float:
    """P(decide "regression") when the true log-shift is ``delta`` and the estimate's true sd is ``se``: the
    estimate must exceed both ``t_(1-alpha, df) * se_hat`` and the threshold, where ``se_hat`` is the estimated
    standard error (``se * sqrt(chi2_df / df)``, independent of the estimate under normality). Integrating over
    the chi-square law of ``se_hat`` is the noncentral-t computation; plugging ``se`` in (a central t) would
    overstate the power at small df."""
    tc = t_quantile(1 - alpha, df)
    if _normal(df):
        return float(st.norm.sf((max(tc * se, threshold_log) - delta) / se))
    se_hat = se * _chi_ratio(df, points)
    return float(np.mean(st.norm.sf((np.maximum(tc * se_hat, threshold_log) - delta) / se)))


@functools.lru_cache(maxsize=256)
def _chi_ratio(df: float, points: int) -> np.ndarray:
    """``sqrt(chi2_df / df)`` at ``points`` mid-quantiles: the law of ``se_hat / se``, the same for every shift (the
    MDE's root search calls :func:`power_at` a dozen times per verdict)."""
    u = (np.arange(points) + 0.5) / points
    out = np.sqrt(st.chi2.ppf(u, df) / df)
    out.flags.writeable = False
    return out


def mde(se: float, df: float, alpha: float, power: float, threshold_log: float) -> float:
    """Smallest true log-shift the rule "significant at alpha and estimate > threshold" catches with ``power``."""
    if se <= 0:
        return threshold_log
    if not (math.isfinite(se) and (math.isfinite(df) or df == math.inf)):
        return math.inf
    hi = threshold_log + 10 * se * max(t_quantile(1 - alpha, df), 1.0)
    while power_at(hi, se, df, alpha, threshold_log) < power:
        hi *= 2
        if hi > 1e6:
            return math.inf
    return float(brentq(lambda d: power_at(d, se, df, alpha, threshold_log) - power, 0.0, hi, xtol=1e-6))


def binomial_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval of a rate (false alarms, detections)."""
    if n == 0:
        return 0.0, 1.0
    res = st.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(res.low), float(res.high)
