"""Property tests of the gate's statistics on synthetic data with known shifts (fast; hypothesis)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from scipy import stats as st

from perfsuite.gate import stats
from perfsuite.gate.policy import Policy, parse_config
from perfsuite.gate.verdict import decide, estimate_cell

CI = settings(max_examples=8, deadline=None, derandomize=bool(os.environ.get("CI")),
              suppress_health_check=[HealthCheck.too_slow])
N_SIM = 400


def _binom_bounds(n: int, p: float, tail: float = 1e-4) -> tuple[int, int]:
    return int(st.binom.ppf(tail, n, p)), int(st.binom.isf(tail, n, p))


def _runs(rng: np.random.Generator, n_runs: int, sigma_b: float, sigma_w: float, n_gen: int,
          shift: float = 0.0) -> list[list[float]]:
    """Per-generation values of n_runs process runs: run effect (between) + generation noise (within)."""
    out = []
    for _ in range(n_runs):
        run = rng.normal(0, sigma_b)
        out.append(list(3.4 * np.exp(shift + run + rng.normal(0, sigma_w, n_gen))))
    return out


@CI
@given(r=hs.integers(3, 10), sigma=hs.floats(0.005, 0.2), alpha=hs.sampled_from([0.01, 0.05, 0.1]),
       seed=hs.integers(0, 2**31 - 1))
def test_between_runs_false_alarm_rate_is_alpha(r: int, sigma: float, alpha: float, seed: int) -> None:
    """Under no shift, the one-sided prediction test rejects at rate alpha (exact for normal log-runs)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(N_SIM):
        y = np.exp(rng.normal(0, sigma, r))
        z = np.exp(rng.normal(0, sigma, 1))
        e = stats.between_runs(y, z)
        hits += stats.t_sf(e.d / e.se, e.df) < alpha
    lo, hi = _binom_bounds(N_SIM, alpha)
    assert lo <= hits <= hi


@CI
@given(r=hs.integers(3, 10), c=hs.integers(1, 4), shift=hs.floats(0.02, 0.3), sigma=hs.floats(0.01, 0.1),
       seed=hs.integers(0, 2**31 - 1))
def test_between_runs_power_matches_noncentral_t(r: int, c: int, shift: float, sigma: float, seed: int) -> None:
    alpha = 0.05
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(N_SIM):
        e = stats.between_runs(np.exp(rng.normal(0, sigma, r)), np.exp(rng.normal(shift, sigma, c)))
        hits += stats.t_sf(e.d / e.se, e.df) < alpha
    df = r - 1 + (c - 1 if c > 1 else 0)
    ncp = shift / (sigma * math.sqrt(1 / r + 1 / c))
    power = float(st.nct.sf(st.t.ppf(1 - alpha, df), df, ncp))
    lo, hi = _binom_bounds(N_SIM, min(max(power, 1e-6), 1 - 1e-6))
    assert lo <= hits <= hi


@CI
@given(k=hs.integers(3, 12), sigma=hs.floats(0.005, 0.1), seed=hs.integers(0, 2**31 - 1))
def test_paired_false_alarm_rate(k: int, sigma: float, seed: int) -> None:
    alpha = 0.05
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(N_SIM):
        drift = rng.normal(0, 0.2, k)  # shared by both members of a pair: cancels
        a = np.exp(drift + rng.normal(0, sigma, k))
        b = np.exp(drift + rng.normal(0, sigma, k))
        e = stats.paired(a, b)
        hits += stats.t_sf(e.d / e.se, e.df) < alpha
    lo, hi = _binom_bounds(N_SIM, alpha)
    assert lo <= hits <= hi


@settings(CI, max_examples=4)
@given(r=hs.integers(3, 8), sigma_b=hs.floats(0.01, 0.08), sigma_w=hs.floats(0.005, 0.08),
       seed=hs.integers(0, 2**31 - 1))
def test_gate_false_alarms_bounded_with_between_run_noise(r: int, sigma_b: float, sigma_w: float,
                                                           seed: int) -> None:
    """The whole per-metric pipeline (per-generation samples -> run medians -> verdict): false alarms <= alpha,
    even though between-run noise dominates (a within-run test would cry wolf here, see the next test)."""
    alpha = 0.05
    rng = np.random.default_rng(seed)
    pol = Policy("median_tpot_ms", threshold=0.0)
    cfg = parse_config({"alpha": alpha})
    hits = 0
    n = 120
    for _ in range(n):
        runs = [_bench(v) for v in _runs(rng, r + 1, sigma_b, sigma_w, 5)]
        v = decide(estimate_cell("t", pol, runs[:-1], runs[-1:], cfg), alpha, 0.8)
        hits += v.failed
    assert hits <= _binom_bounds(n, alpha)[1]


def test_within_run_test_alone_cries_wolf_under_between_run_noise() -> None:
    """Why between-run variance must enter: Mann-Whitney on pooled generations flags A/A runs far above alpha."""
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(200):
        runs = _runs(rng, 6, 0.03, 0.01, 5)
        base = [x for r in runs[:-1] for x in r]
        hits += st.mannwhitneyu(runs[-1], base, alternative="greater").pvalue < 0.01
    assert hits > 20  # >> 1 % of 200


@CI
@given(shift=hs.floats(0.08, 0.25), seed=hs.integers(0, 2**31 - 1))
def test_gate_detects_shift_well_above_mde(shift: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    pol = Policy("median_tpot_ms", threshold=0.03)
    cfg = parse_config({"alpha": 0.01, "baseline_runs": 8})
    det = 0
    n = 60
    for _ in range(n):
        runs = [_bench(v) for v in _runs(rng, 8, 0.01, 0.01, 5)]
        cur = [_bench(v) for v in _runs(rng, 1, 0.01, 0.01, 5, shift=shift)]
        det += decide(estimate_cell("t", pol, runs, cur, cfg), 0.01, 0.8).failed
    assert det >= 0.9 * n


def _bench(gen_values: list[float]) -> dict:
    return {"extra_info": {"samples": {"tpot_ms": gen_values}, "median_tpot_ms": float(np.median(gen_values))},
            "stats": {}}


@settings(max_examples=50, deadline=None, derandomize=bool(os.environ.get("CI")))
@given(ps=hs.lists(hs.floats(0, 1), min_size=1, max_size=30), alpha=hs.floats(0.001, 0.2))
def test_holm_properties(ps: list[float], alpha: float) -> None:
    adj = stats.holm(ps)
    m = len(ps)
    for p, a in zip(ps, adj, strict=False):
        assert p - 1e-12 <= a <= min(1.0, m * p) + 1e-12
    order = np.argsort(ps, kind="stable")
    assert all(adj[order[i]] <= adj[order[i + 1]] + 1e-12 for i in range(m - 1))
    levels = stats.holm_levels(ps, alpha)
    for p, a, lv in zip(ps, adj, levels, strict=False):
        assert (p < lv) == (a < alpha) or math.isclose(a, alpha)
        assert alpha / m - 1e-15 <= lv <= alpha + 1e-15  # never looser than alpha, never tighter than Bonferroni


def test_holm_known_values() -> None:
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_within_run_var_of_mean_matches_theory() -> None:
    rng = np.random.default_rng(0)
    x = np.exp(rng.normal(0, 0.05, 400))
    v = stats.within_run_log_var(x, "mean")
    assert v == pytest.approx(0.05**2 / 400, rel=0.25)
    assert stats.within_run_log_var([1.0, 2.0], "median") is None
    assert stats.within_run_log_var([1.0, -2.0, 3.0], "median") is None


def test_mde_and_runs_needed() -> None:
    e = stats.Estimate(d=0.0, se=0.02, df=9, method="runs", n_baseline=10, n_current=1, s_unit=0.019)
    m = stats.mde(e.se, e.df, 0.01, 0.8, math.log1p(0.03))
    assert m == pytest.approx(st.t.ppf(0.99, 9) * 0.02 + st.t.ppf(0.8, 9) * 0.02)
    assert stats.mde(0.001, 9, 0.01, 0.8, math.log1p(0.03)) > math.log1p(0.03)  # threshold dominates
    inc = stats.Estimate(d=0.06, se=0.04, df=4, method="runs", n_baseline=5, n_current=1, s_unit=0.035)
    more = stats.runs_needed(inc, 0.01, math.log1p(0.03))
    assert more is not None and more >= 1
    on_edge = stats.Estimate(d=math.log1p(0.03), se=0.04, df=4, method="runs", n_baseline=5, n_current=1,
                             s_unit=0.035)
    assert stats.runs_needed(on_edge, 0.01, math.log1p(0.03)) is None


def test_statistic_names() -> None:
    assert stats.statistic([1, 2, 3, 4], "p50") == pytest.approx(2.5)
    assert stats.statistic([1, 2, 3, 4], "min") == 1
    with pytest.raises(ValueError, match="allowed"):
        stats.statistic([1.0], "p100")
