"""Verdict logic (regression / improvement / unchanged / inconclusive), exact metrics, and GateSession."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfsuite.verdict.decide import Verdict, decide, decide_all, guard_blocks
from perfsuite.verdict.estimate import Comparison
from perfsuite.verdict.policy import Policy, parse_config
from perfsuite.verdict.report import describe
from perfsuite.verdict.screen import GateSession
from perfsuite.verdict.stats import Estimate

TAU = 0.05


def _cell(d: float, se: float, df: float = 9, policy: Policy | None = None, method: str = "runs") -> Comparison:
    pol = policy or Policy("median_tpot_ms", threshold=TAU)
    est = Estimate(d=d, se=se, df=df, method=method, n_baseline=10, n_current=1, s_unit=se / math.sqrt(1.1))
    return Comparison("tests/perf/test_latency.py::test_tpot[c]", pol, est, (1.0,) * 10, (math.exp(d),))


@pytest.mark.parametrize(("d", "se", "kind"), [
    (math.log(1.20), 0.01, "regression"),  # significant and beyond the threshold
    (math.log(1.03), 0.005, "unchanged"),  # significant but inside the threshold; interval inside +-5 %
    (math.log(1.20), 0.10, "inconclusive"),  # beyond the threshold but not significant
    (math.log(1.04), 0.02, "inconclusive"),  # interval reaches past the threshold: baseline too short
    (math.log(1.07), 0.025, "inconclusive"),  # beyond the threshold, p > alpha
    (math.log(0.80), 0.01, "improvement"),
    (0.0, 0.005, "unchanged"),
])
def test_kinds(d: float, se: float, kind: str) -> None:
    v = decide(_cell(d, se), 0.01, 0.8)
    assert isinstance(v, Verdict)
    assert v.kind == kind
    assert v.failed == (kind == "regression")
    assert v.ratio == pytest.approx(math.exp(d))
    assert v.ci_low < v.ratio < v.ci_high
    assert v.mde is not None and v.mde >= TAU
    assert "MDE" in describe(v) and v.kind in describe(v)


def test_higher_is_better_flips() -> None:
    pol = Policy("output_throughput_tokens_per_s", direction="higher_is_better", threshold=TAU)
    assert decide(_cell(math.log(0.8), 0.01, policy=pol), 0.01, 0.8).kind == "regression"
    assert decide(_cell(math.log(1.2), 0.01, policy=pol), 0.01, 0.8).kind == "improvement"


def test_one_baseline_run_never_fails() -> None:
    v = decide(_cell(math.log(2.0), 0.01, method="processes"), 0.01, 0.8)
    assert v.kind == "inconclusive" and "record more baseline runs" in v.note


def test_rank_guard_blocks_a_current_run_inside_the_baseline_range() -> None:
    pol = Policy("median_tpot_ms", threshold=TAU)
    est = Estimate(d=math.log(1.2), se=0.01, df=9, method="runs", n_baseline=3, n_current=1, s_unit=0.01)
    inside = Comparison("t", pol, est, (1.0, 1.0, 1.25), (1.2,))
    beyond = Comparison("t", pol, est, (1.0, 1.0, 1.05), (1.2,))
    assert guard_blocks(inside) and not guard_blocks(beyond)
    v = decide(inside, 0.01, 0.8)
    assert v.kind == "inconclusive" and "rank guard" in v.note
    assert decide(beyond, 0.01, 0.8).kind == "regression"


def test_verdict_is_frozen() -> None:
    v = decide(_cell(0.0, 0.01), 0.01, 0.8)
    with pytest.raises(AttributeError):
        v.kind = "regression"  # type: ignore[misc]


@pytest.mark.parametrize(("pol", "base", "cur", "kind"), [
    (Policy("generated_tokens", direction="equal", exact=True), (160, 160), (160,), "unchanged"),
    (Policy("generated_tokens", direction="equal", exact=True), (160, 160), (159,), "regression"),
    (Policy("generated_tokens", direction="equal", exact=True), (160,), (161,), "regression"),
    (Policy("peak_rss_bytes", exact=True), (1000, 1002), (1001,), "unchanged"),
    (Policy("peak_rss_bytes", exact=True, tolerance=0.1), (1000,), (1090,), "unchanged"),
    (Policy("peak_rss_bytes", exact=True, tolerance=0.1), (1000,), (1200,), "regression"),
    (Policy("peak_rss_bytes", exact=True, abs_tolerance=50), (1000,), (900,), "improvement"),
])
def test_exact(pol: Policy, base: tuple, cur: tuple, kind: str) -> None:
    v = decide(Comparison("t", pol, None, tuple(map(float, base)), tuple(map(float, cur))), 0.01, 0.8)
    assert v.kind == kind and v.exact and v.mde is None


def test_family_holm_is_at_least_as_powerful_as_bonferroni() -> None:
    cells = [_cell(math.log(1.10), 0.025), _cell(math.log(1.10), 0.03), _cell(0.0, 0.01)]
    holm = decide_all(cells, 0.05, 0.8, "holm")
    bonf = decide_all(cells, 0.05, 0.8, "bonferroni")
    assert sum(v.failed for v in holm) >= sum(v.failed for v in bonf)
    assert all(vb.failed <= vh.failed for vh, vb in zip(holm, bonf, strict=False))


def _info(tpot: list[float], tokens: int = 155, workers: int = 5) -> dict:
    procs = [{"samples": {"tpot_ms": [t * (1 + 0.001 * k) for k in range(5)]}, "wall_s": 1.0} for t in tpot]
    return {"processes": procs, "samples": {"tpot_ms": tpot}, "median_tpot_ms": float(np.median(tpot)),
            "generated_tokens": tokens, "cell": {"id": "torch-tiny-llama-float32-b1-p64-n32"},
            "measured_by": {"profile": "smoke", "worker_processes": workers}}


NAME = "tests/perf/test_latency.py::test_tpot[torch-tiny-llama-float32-b1-p64-n32]"


def _run(tpot: list[float]) -> dict:
    return {"machine_info": {"perfsuite": {"schema_version": 1, "runner_class": "cpu-x-2c"}},
            "commit_info": {"id": "abc123"}, "benchmarks": [
        {"name": "test_tpot[torch-tiny-llama-float32-b1-p64-n32]", "fullname": NAME,
         "stats": {"median": 0.0034}, "extra_info": _info(tpot)}]}


def _procs(rng: np.random.Generator, scale: float = 1.0) -> list[float]:
    return list(3.4 * scale * np.exp(rng.normal(rng.normal(0, 0.005), 0.02, 5)))


def test_gate_session_fails_the_regressed_test_only() -> None:
    rng = np.random.default_rng(0)
    s = GateSession([_run(_procs(rng)) for _ in range(6)], {"alpha": 0.01, "baseline_runs": 5})
    s.family = {NAME: 1, "b": 1, "c": 1}
    ok = s.check(NAME, _info(_procs(rng)))
    assert {v.metric for v in ok} == {"median_tpot_ms", "generated_tokens"}
    assert s.failure_message(ok) is None
    assert [v.n_baseline for v in ok if not v.exact] == [5]  # the newest baseline_runs comparable runs
    slow = s.check(NAME, _info(_procs(rng, 1.3)))
    msg = s.failure_message(slow)
    assert msg is not None and "median_tpot_ms: regression" in msg and "+3" in msg
    tok = s.check(NAME, _info(_procs(rng), tokens=150))
    assert "generated_tokens: regression" in (s.failure_message(tok) or "")
    assert s.check("tests/perf/test_latency.py::test_unknown[x]", _info([1.0, 1.0, 1.0])) == []
    # matched by name when the fullname differs (a different rootdir)
    assert s.check("other/test_latency.py::test_tpot[torch-tiny-llama-float32-b1-p64-n32]", _info(_procs(rng)))
    table = s.summary_table()
    assert any("REGRESSION" in line for line in table) and any("Holm" in line for line in table)


def test_family_counts_tests_that_ran_and_tightens_alpha() -> None:
    s = GateSession([_run([3.4, 3.41, 3.39, 3.4, 3.42]) for _ in range(3)], parse_config({}))
    s.family = {f"t{i}": 1 for i in range(10)}
    vs = s.check(NAME, _info([3.4] * 5))
    assert [v.alpha for v in vs if not v.exact] == [pytest.approx(0.001)]


def test_tests_join_the_family_only_with_a_baseline() -> None:
    """Serving tests join through add_to_family (perfsuite.adapters.pytest.serving): one without a stored run must not take a
    share of alpha from the others."""
    s = GateSession([_run([3.4] * 5) for _ in range(3)], parse_config({}))
    s.add_to_family([NAME, "tests/perf/test_serving.py::test_ttft_under_load[vllm-serve-none]"])
    assert s.family == {NAME: 1}


def test_inconclusive_message_names_the_mde_and_the_ab_command() -> None:
    rng = np.random.default_rng(5)
    s = GateSession([_run(list(3.4 * np.exp(rng.normal(0, 0.15, 5)))) for _ in range(4)], parse_config({}))
    s.family = {NAME: 1}
    vs = s.check(NAME, _info(list(3.4 * 1.05 * np.exp(rng.normal(0, 0.05, 5)))))
    msg = s.inconclusive_message(NAME, vs)
    assert msg is not None and "MDE" in msg and "perfsuite ab --a ../perfsuite-base --b ." in msg
    assert "git worktree add ../perfsuite-base abc123" in msg and "--budget" in msg


def test_pr_run_against_smoke_baselines_is_incomparable_not_a_failure() -> None:
    """A run measured with other generations/profile is not compared (the generated_tokens 20 vs 5 failure)."""
    s = GateSession([_run([3.4] * 5) for _ in range(3)], parse_config({}))
    s.family = {NAME: 1}
    info = _info([3.4] * 5, tokens=620)
    info["measured_by"] = {"profile": "pr", "worker_processes": 5}
    vs = s.check(NAME, info)
    assert vs and all(v.kind == "incomparable" and not v.failed for v in vs)
    assert "profile pr vs smoke" in (s.inconclusive_message(NAME, vs) or "")


def _info_n(tpot: list[float]) -> dict:
    info = _info(tpot, workers=len(tpot))
    info["measured_by"]["worker_processes"] = len(tpot)
    return info


def _run_n(tpot: list[float]) -> dict:
    run = _run(tpot)
    run["benchmarks"][0]["extra_info"] = _info_n(tpot)
    return run


def test_one_stalled_process_does_not_hide_a_regression() -> None:
    """Seen on this 2-core VM (gate evaluation, 2026-12-01): of 10 processes of a +20 % run, one ran 4.7 ms
    instead of 1.0 (a co-runner preempting a thread). The run value drops it (trimmed mean); its variance must
    not count it either (winsorized, as Yuen's t), or the screen is inconclusive with an MDE of ~+95 %."""
    from perfsuite.verdict import values

    rng = np.random.default_rng(3)
    base = [_run_n(list(np.exp(rng.normal(0, 0.02, 10)))) for _ in range(10)]
    cur = list(1.2 * np.exp(rng.normal(0, 0.02, 10)))
    cur[4] = 4.7
    plain = float(np.var(np.log(cur), ddof=1) / len(cur))
    robust = values.within_run_var({"extra_info": _info_n(cur)}, "median_tpot_ms")
    assert robust is not None and robust < plain / 20
    s = GateSession(base, {"alpha": 0.01, "baseline_runs": 10})
    s.family = {NAME: 1}
    v = next(v for v in s.check(NAME, _info_n(cur)) if v.metric == "median_tpot_ms")
    assert v.kind == "regression", v
    # without the stalled process, the same run is the same verdict: the outlier changes nothing
    clean = next(v for v in s.check(NAME, _info_n([c for i, c in enumerate(cur) if i != 4] + [1.2]))
                 if v.metric == "median_tpot_ms")
    assert clean.kind == "regression"


def test_winsorized_variance_equals_the_plain_one_when_nothing_is_cut() -> None:
    from perfsuite.verdict import values

    x = [1.0, 1.1, 1.05, 0.97]  # four processes: nothing trimmed
    assert values.within_run_var({"extra_info": _info_n(x)}, "median_tpot_ms") == pytest.approx(
        float(np.var(np.log(x), ddof=1) / 4))
