"""The statistics of the gate. Pure functions on numbers; no I/O, no pytest.

Everything works on the log scale: a log-ratio ``d = log(current) - log(baseline)`` turns "5 % slower" into the
same additive shift at every latency, and run-to-run noise of latencies is closer to multiplicative than additive.

The unit is a *process run* (between runs) or a *generation* (within a run), never a token: the decode steps of
one generation share a KV cache, a context length and a moment of the machine, so they are correlated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as st

STATISTICS = ("mean", "median", "min", "p1..p99")


def statistic(values: Sequence[float], name: str) -> float:
    """One run's aggregate of its per-unit values (``p90``/``p99`` interpolate like numpy/vLLM)."""
    x = np.asarray(values, dtype=float)
    if name == "mean":
        return float(x.mean())
    if name == "median":
        return float(np.median(x))
    if name == "min":
        return float(x.min())
    if name.startswith("p") and name[1:].isdigit() and 0 < int(name[1:]) < 100:
        return float(np.percentile(x, float(name[1:])))
    raise ValueError(f"unknown statistic {name!r}; allowed: {', '.join(STATISTICS)}")


def _statistic_rows(x: np.ndarray, name: str) -> np.ndarray:
    if name == "mean":
        return x.mean(axis=1)
    if name == "median":
        return np.median(x, axis=1)
    if name == "min":
        return x.min(axis=1)
    statistic([1.0], name)  # validates the name
    return np.percentile(x, float(name[1:]), axis=1)


def within_run_log_var(values: Sequence[float], name: str, n_boot: int = 400, seed: int = 0) -> float | None:
    """Variance of ``log(statistic(values))`` over repeated runs *if only within-run noise existed*.

    Deterministic bootstrap over the per-unit values (generations). ``None`` with fewer than 3 values or any
    non-positive value (a log needs positive numbers).
    """
    x = np.asarray(values, dtype=float)
    if x.size < 3 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        return None
    lx = np.log(x)
    if name == "mean":  # delta method: var(log mean) ~ var(x) / (n mean^2)
        return float(x.var(ddof=1) / (x.size * x.mean() ** 2))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    boots = _statistic_rows(np.exp(lx[idx]), name)
    v = float(np.log(boots).var(ddof=1))
    # The bootstrap of a median of few values is lumpy; never report less than the mean's variance / n.
    return max(v, float(lx.var(ddof=1) / x.size))


@dataclass(frozen=True)
class Estimate:
    """A log-ratio estimate with its standard error and degrees of freedom (t distribution)."""

    d: float  # log(current / baseline), oriented as measured (not by direction)
    se: float
    df: float
    method: str
    n_baseline: int  # runs (or generations for the within-run method)
    n_current: int
    s_unit: float  # SD of one unit (run) on the log scale, used to project "how many more runs"

    def ci(self, level_alpha: float) -> tuple[float, float]:
        """Two-sided interval whose lower (upper) bound is the one-sided ``level_alpha`` test's bound."""
        q = t_quantile(1 - level_alpha, self.df)
        return self.d - q * self.se, self.d + q * self.se


def t_quantile(p: float, df: float) -> float:
    if not math.isfinite(df) or df > 1e6:
        return float(st.norm.ppf(p))
    return float(st.t.ppf(p, df))


def t_sf(x: float, df: float) -> float:
    if not math.isfinite(df) or df > 1e6:
        return float(st.norm.sf(x))
    return float(st.t.sf(x, df))


def between_runs(baseline: Sequence[float], current: Sequence[float], *, prior_sd: float | None = None,
                 prior_df: float = 0.0, current_within_var: float | None = None) -> Estimate:
    """Hierarchical comparison on per-run aggregates (``baseline``: R >= 2 runs, ``current``: C >= 1 runs).

    The variance of one run's log-aggregate, ``s^2``, is estimated from the spread of the baseline runs (it
    contains both the within-run noise and the process-to-process noise). With C >= 2 current runs the two
    groups' spreads are pooled (Student's two-sample t on logs, df = R + C - 2); with C = 1 this is the t
    *prediction* interval of one new run against R runs (df = R - 1).

    ``prior_sd``/``prior_df``: a moderated variance (limma-style empirical Bayes): ``prior_df`` pseudo-runs of
    spread ``prior_sd`` (e.g. from ``perfsuite calibrate``) are pooled into s^2, adding ``prior_df`` degrees of
    freedom. ``current_within_var``: the current run's own within-run variance of its log-aggregate; if the
    current run is noisier inside than baseline runs are between each other, that larger variance is used for
    it (a run on a disturbed machine does not get a tight interval).
    """
    y = np.log(np.asarray(baseline, dtype=float))
    z = np.log(np.asarray(current, dtype=float))
    r, c = y.size, z.size
    if r < 2 or c < 1:
        raise ValueError("between_runs needs >= 2 baseline runs and >= 1 current run")
    ss = float(((y - y.mean()) ** 2).sum()) + (float(((z - z.mean()) ** 2).sum()) if c > 1 else 0.0)
    df = float(r - 1 + (c - 1 if c > 1 else 0))
    if prior_sd is not None and prior_df > 0:
        ss += prior_df * prior_sd**2
        df += prior_df
    s2 = ss / df
    s2_cur = max(s2, current_within_var) if current_within_var is not None else s2
    se = math.sqrt(s2 / r + s2_cur / c)
    method = "runs" + (f"+prior(df={prior_df:g})" if prior_sd is not None and prior_df > 0 else "")
    return Estimate(float(z.mean() - y.mean()), se, df, method, r, c, math.sqrt(s2))


def within_run(baseline_units: Sequence[float], current_units: Sequence[float], name: str, *,
               prior_sd: float | None, prior_df: float = 0.0) -> Estimate | None:
    """One baseline run only: compare the two runs' aggregates using within-run (per-generation) noise.

    Within-run noise alone ignores the process-to-process component, which on a shared machine is the larger
    one, so ``prior_sd`` (between-run SD of a log-aggregate, from calibrate) is added to both sides. Without a
    prior the result is marked ``within-only`` and callers treat it as inconclusive for failing (see verdict).
    """
    vb = within_run_log_var(baseline_units, name)
    vc = within_run_log_var(current_units, name)
    if vb is None or vc is None:
        return None
    d = math.log(statistic(current_units, name)) - math.log(statistic(baseline_units, name))
    nb, nc = len(baseline_units), len(current_units)
    # Welch-Satterthwaite df of the two within-run parts
    df_w = (vb + vc) ** 2 / (vb**2 / max(nb - 1, 1) + vc**2 / max(nc - 1, 1))
    if prior_sd is not None:
        var = vb + vc + 2 * prior_sd**2
        df = max(prior_df, 1.0) if prior_df > 0 else df_w
        return Estimate(d, math.sqrt(var), df, "within+prior", nb, nc, math.sqrt(var / 2))
    return Estimate(d, math.sqrt(vb + vc), df_w, "within-only", nb, nc, math.sqrt((vb + vc) / 2))


def paired(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """Paired A/B: per-pair log-ratios ``log(b_i / a_i)``, one-sample t (df = k - 1).

    Pairs ran back to back in random order, so slow drift of the machine cancels inside each pair.
    """
    la = np.log(np.asarray(a, dtype=float))
    lb = np.log(np.asarray(b, dtype=float))
    if la.size != lb.size or la.size < 2:
        raise ValueError("paired needs >= 2 complete pairs")
    diff = lb - la
    k = diff.size
    s = float(diff.std(ddof=1))
    return Estimate(float(diff.mean()), s / math.sqrt(k), float(k - 1), "paired", k, k, s)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (controls the family-wise error rate, uniformly beats Bonferroni)."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    adj = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return [float(v) for v in adj]


def holm_levels(pvalues: Sequence[float], alpha: float) -> list[float]:
    """Per-hypothesis significance levels that make single-test decisions equal Holm's.

    Hypothesis of rank i (0-based, ascending p) gets ``alpha / (m - min(i, i0))`` where i0 is the first rank
    Holm does not reject; so ``p < level`` iff Holm rejects, and intervals can be drawn at that level.
    """
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    order = np.argsort(p, kind="stable")
    levels = [0.0] * m
    stop = m
    for rank, i in enumerate(order):
        if p[i] >= alpha / (m - rank):
            stop = rank
            break
    for rank, i in enumerate(order):
        levels[int(i)] = alpha / (m - min(rank, stop))
    return levels


def mde(se: float, df: float, alpha: float, power: float, threshold_log: float) -> float:
    """Smallest true log-shift the rule "significant at alpha and estimate > threshold" catches with ``power``."""
    return max(t_quantile(1 - alpha, df) * se, threshold_log) + t_quantile(power, df) * se


def runs_needed(est: Estimate, alpha: float, threshold_log: float, paired_design: bool = False,
                cap: int = 200) -> int | None:
    """How many *more* current runs (pairs for A/B) would settle an inconclusive verdict, if the estimate and the
    unit spread stayed as observed; ``None`` when no number up to ``cap`` would (estimate sits on a boundary, or
    the baseline's own uncertainty alone is too large: then record more baseline runs)."""
    d = abs(est.d)
    margin = d if d > threshold_log else threshold_log - d
    if margin <= 0 or est.s_unit <= 0:
        return None
    r = est.n_baseline
    for extra in range(1, cap + 1):
        if paired_design:
            k = est.n_current + extra
            se, df = est.s_unit / math.sqrt(k), k - 1.0
        else:
            c = est.n_current + extra
            se = est.s_unit * math.sqrt(1 / r + 1 / c)
            df = est.df + (c - 1) - (est.n_current - 1 if est.n_current > 1 else 0)
        if t_quantile(1 - alpha, df) * se < margin:
            return extra
    return None


def binomial_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval of a rate (false alarms, detections)."""
    if n == 0:
        return 0.0, 1.0
    res = st.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(res.low), float(res.high)


def planned_mde(s_unit: float, alpha: float, power: float, threshold_log: float, *, baseline_runs: int = 0,
                current_runs: int = 1, pairs: int = 0) -> float:
    """MDE (log scale) a design would reach at between-run SD ``s_unit`` (log scale): ``baseline_runs`` vs
    ``current_runs`` (pooled t), or ``pairs`` A/B pairs (per-pair SD taken as sqrt(2) * s_unit: no credit for
    drift cancelled inside pairs, so real A/B runs do at least this well)."""
    if pairs:
        return mde(math.sqrt(2) * s_unit / math.sqrt(pairs), pairs - 1, alpha, power, threshold_log)
    se = s_unit * math.sqrt(1 / baseline_runs + 1 / current_runs)
    df = baseline_runs - 1 + (current_runs - 1 if current_runs > 1 else 0)
    return mde(se, df, alpha, power, threshold_log)
