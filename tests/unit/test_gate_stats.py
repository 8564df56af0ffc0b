"""Property tests of the gate's statistics on synthetic process-replicated runs with known shifts (hypothesis)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from scipy import stats as st

from perfsuite.verdict import stats
from perfsuite.verdict.decide import decide
from perfsuite.verdict.estimate import estimate
from perfsuite.verdict.policy import Policy, parse_config

CI = settings(max_examples=8, deadline=None, derandomize=bool(os.environ.get("CI")),
              suppress_health_check=[HealthCheck.too_slow])
N_SIM = 400


def _binom_bounds(n: int, p: float, tail: float = 1e-4) -> tuple[int, int]:
    return int(st.binom.ppf(tail, n, p)), int(st.binom.isf(tail, n, p))


def run_entry(rng: np.random.Generator, *, workers: int = 8, sigma_run: float = 0.01, sigma_proc: float = 0.05,
              sigma_gen: float = 0.01, gens: int = 5, shift: float = 0.0, heavy: bool = False) -> dict:
    """One run: a run effect (drift), W processes (each with its own lifelong effect; heavy = some processes
    13 % slow for their whole life, as seen on this VM) and per-generation noise."""
    run = rng.normal(0, sigma_run)
    procs = []
    for _ in range(workers):
        p = rng.normal(0, sigma_proc) + (0.13 if heavy and rng.random() < 0.15 else 0.0)
        gen = list(1.8 * np.exp(shift + run + p + rng.normal(0, sigma_gen, gens)))
        procs.append({"samples": {"tpot_ms": gen}})
    return {"extra_info": {"processes": procs, "measured_by": {"profile": "smoke", "worker_processes": workers}},
            "stats": {}}


@CI
@given(r=hs.integers(3, 10), sigma=hs.floats(0.005, 0.2), alpha=hs.sampled_from([0.01, 0.05, 0.1]),
       seed=hs.integers(0, 2**31 - 1))
def test_between_runs_false_alarm_rate_is_alpha(r: int, sigma: float, alpha: float, seed: int) -> None:
    """Under no shift, the one-sided prediction test rejects at rate alpha (exact for normal log-runs)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(N_SIM):
        e = stats.between_runs(np.exp(rng.normal(0, sigma, r)), np.exp(rng.normal(0, sigma, 1)))
        hits += stats.t_sf(e.d / e.se, e.df) < alpha
    lo, hi = _binom_bounds(N_SIM, alpha)
    assert lo <= hits <= hi


@CI
@given(r=hs.integers(3, 10), shift=hs.floats(0.0, 0.3), sigma=hs.floats(0.01, 0.1), seed=hs.integers(0, 2**31 - 1))
def test_power_at_matches_simulation(r: int, shift: float, sigma: float, seed: int) -> None:
    """stats.power_at (the MDE's engine) equals the simulated rate of "significant and beyond threshold"."""
    alpha, thr = 0.01, math.log1p(0.03)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(N_SIM):
        e = stats.between_runs(np.exp(rng.normal(0, sigma, r)), np.exp(rng.normal(shift, sigma, 1)))
        hits += stats.t_sf(e.d / e.se, e.df) < alpha and e.d > thr
    p = stats.power_at(shift, sigma * math.sqrt(1 + 1 / r), r - 1, alpha, thr)
    lo, hi = _binom_bounds(N_SIM, min(max(p, 1e-6), 1 - 1e-6))
    assert lo <= hits <= hi


def test_mde_is_where_power_reaches_the_goal_and_beats_the_central_t_shortcut() -> None:
    se, df, alpha, thr = 0.02, 4, 0.01, math.log1p(0.03)
    m = stats.mde(se, df, alpha, 0.8, thr)
    assert stats.power_at(m, se, df, alpha, thr) == pytest.approx(0.8, abs=1e-3)
    central = st.t.ppf(1 - alpha, df) * se + st.t.ppf(0.8, df) * se  # the old formula
    assert stats.power_at(central, se, df, alpha, thr) < 0.8  # it overstated power at small df
    assert stats.mde(1e-4, 9, 0.01, 0.8, thr) == pytest.approx(thr, abs=1e-3)  # threshold dominates


@settings(CI, max_examples=4)
@given(r=hs.integers(3, 10), sigma_run=hs.floats(0.0, 0.04), sigma_proc=hs.floats(0.01, 0.1),
       heavy=hs.booleans(), seed=hs.integers(0, 2**31 - 1))
def test_gate_false_alarms_bounded_with_process_and_run_noise(r: int, sigma_run: float, sigma_proc: float,
                                                              heavy: bool, seed: int) -> None:
    """The whole pipeline (generations -> process values -> trimmed run values -> verdict): A/A false alarms stay
    <= alpha with drift between runs, process noise and lifelong-slow processes."""
    alpha = 0.05
    rng = np.random.default_rng(seed)
    pol = Policy("median_tpot_ms", threshold=0.0)
    cfg = parse_config({"alpha": alpha})
    n = 150
    hits = 0
    for _ in range(n):
        runs = [run_entry(rng, sigma_run=sigma_run, sigma_proc=sigma_proc, heavy=heavy) for _ in range(r + 1)]
        hits += decide(estimate("t", pol, runs[:-1], runs[-1:], cfg), alpha, 0.8).failed
    assert hits <= _binom_bounds(n, alpha)[1]


@CI
@given(shift=hs.floats(0.13, 0.3), seed=hs.integers(0, 2**31 - 1))
def test_gate_detects_shift_well_above_mde(shift: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    pol = Policy("median_tpot_ms", threshold=0.03)
    cfg = parse_config({"alpha": 0.01, "baseline_runs": 10})
    det = 0
    n = 40
    for _ in range(n):
        runs = [run_entry(rng) for _ in range(10)]
        cur = run_entry(rng, shift=shift)
        det += decide(estimate("t", pol, runs, [cur], cfg), 0.01, 0.8).failed
    assert det >= 0.9 * n


def test_one_baseline_run_never_fails_but_says_something() -> None:
    rng = np.random.default_rng(3)
    pol = Policy("median_tpot_ms", threshold=0.03)
    cfg = parse_config({})
    v = decide(estimate("t", pol, [run_entry(rng)], [run_entry(rng, shift=0.5)], cfg), 0.01, 0.8)
    assert v.kind == "inconclusive" and v.method == "processes" and "record more baseline runs" in v.note
    assert v.ratio == pytest.approx(math.exp(0.5), rel=0.1) and v.mde is not None


def test_measured_differently_is_incomparable_not_a_regression() -> None:
    rng = np.random.default_rng(4)
    pol = Policy("median_tpot_ms", threshold=0.03)
    base = [run_entry(rng) for _ in range(5)]
    cur = run_entry(rng, shift=1.0)
    cur["extra_info"]["measured_by"] = {"profile": "pr", "worker_processes": 8}
    v = decide(estimate("t", pol, base, [cur], parse_config({})), 0.01, 0.8)
    assert v.kind == "incomparable" and not v.failed and "profile pr vs smoke" in v.note


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


def test_holm_known_values_and_alignment() -> None:
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm_adjusted([0.01, None, 0.04, 0.03]) == pytest.approx([0.03, None, 0.06, 0.06])


def test_processes_welch_matches_the_hand_written_formula() -> None:
    """The one-baseline-run estimate (scipy's Welch df) gives the numbers of the formula it replaced."""
    b, c = [10.2, 10.5, 9.9, 10.1, 10.4, 10.0], [10.9, 11.3, 10.8, 11.6]
    y, z = np.log(b), np.log(c)
    vb, vc = y.var(ddof=1) / y.size, z.var(ddof=1) / z.size
    df = (vb + vc) ** 2 / (vb**2 / (y.size - 1) + vc**2 / (z.size - 1))
    e = stats.processes(b, c)
    assert e.d == pytest.approx(0.09049184386849873, rel=1e-12) == z.mean() - y.mean()
    assert e.se == pytest.approx(0.018942108726083734, rel=1e-12) == math.sqrt(vb + vc)
    assert e.df == pytest.approx(4.895021247321608, rel=1e-12) == pytest.approx(df, rel=1e-12)
    assert (e.method, e.n_baseline, e.n_current) == ("processes", 6, 4)
    flat = stats.processes([5.0, 5.0, 5.0], [5.0, 5.0])  # no spread: the pooled df, no NaN
    assert (flat.d, flat.se, flat.df) == (0.0, 0.0, 3.0)


def test_statistic_names() -> None:
    assert stats.statistic([1, 2, 3, 4], "p50") == pytest.approx(2.5)
    assert stats.statistic([1, 2, 3, 4], "min") == 1
    with pytest.raises(ValueError, match="allowed"):
        stats.statistic([1.0], "p100")


def test_min_run_cv_floor_keeps_a_slow_period_from_failing() -> None:
    """Baselines recorded back to back (1 % spread) vs a run 12 % slower from a slow period of the machine: a
    regression on the baselines' own spread, not beyond a floor measured over hours."""
    rng = np.random.default_rng(6)
    pol = Policy("median_tpot_ms", threshold=0.03)
    base = [run_entry(rng, sigma_run=0.005, sigma_proc=0.02) for _ in range(10)]
    cur = run_entry(rng, sigma_run=0.0, sigma_proc=0.02, shift=math.log(1.12))
    assert decide(estimate("t", pol, base, [cur], parse_config({})), 0.0033, 0.8).kind == "regression"
    v = decide(estimate("t", pol, base, [cur], parse_config({"min_run_cv": 0.06})), 0.0033, 0.8)
    assert v.kind != "regression" and v.method == "runs+floor" and v.mde is not None and v.mde > 0.2
