"""PerfSession.gate_check says what happened (a GateOutcome); pytest_session.enforce raises it in the calling test."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from perfsuite.adapters.pytest import hooks as pytest_session
from perfsuite.orchestrate.session import PerfSession
from perfsuite.verdict.outcome import GateIncomparable, GateInconclusive, GateOutcome
from perfsuite.verdict.outputs import OutputsCheck
from perfsuite.verdict.policy import parse_config

NODE = "tests/perf/test_latency.py::test_tpot[c]"


class FakeGate:
    def __init__(self, fail: str | None = None, unsure: str | None = None, changed: str | None = None) -> None:
        self.fail, self.unsure, self.changed = fail, unsure, changed
        self.seen: tuple[Any, ...] = ()

    def outputs(self, nodeid: str, extra_info: dict[str, Any]) -> OutputsCheck:
        return OutputsCheck("changed", self.changed) if self.changed else OutputsCheck("same")

    def check(self, nodeid: str, extra_info: dict[str, Any], stats: dict[str, Any]) -> list[str]:
        self.seen = (nodeid, extra_info, stats)
        return ["verdict"]

    def failure_message(self, verdicts: list[str]) -> str | None:
        return self.fail

    def inconclusive_message(self, nodeid: str, verdicts: list[str]) -> str | None:
        return self.unsure


def session(gate: Any = None, *, strict: bool = False, confirm: Any = None) -> PerfSession:
    return PerfSession(SimpleNamespace(), {}, gate_config=parse_config({}), gate=gate,  # type: ignore[arg-type]
                       fail_on_inconclusive=strict, confirm=confirm)


INFO_STATS = ({"metric": "tpot"}, {"median": 0.002})  # a test's extra_info and its recorded statistics


def test_no_gate_nothing_happens() -> None:
    out = session().gate_check(NODE, *INFO_STATS)
    assert out == GateOutcome()
    pytest_session.enforce(out)


def test_the_gate_sees_the_recorded_statistics_and_a_regression_fails_the_test() -> None:
    gate = FakeGate(fail="perfsuite gate: significant regression")
    out = session(gate).gate_check(NODE, *INFO_STATS)
    assert gate.seen == (NODE, {"metric": "tpot"}, {"median": 0.002})
    assert out == GateOutcome(failure="perfsuite gate: significant regression")
    with pytest.raises(pytest.fail.Exception, match="significant regression"):
        pytest_session.enforce(out)


def test_inconclusive_warns_at_the_callers_line_or_fails_when_asked() -> None:
    out = session(FakeGate(unsure="undecided, MDE 3%")).gate_check(NODE, *INFO_STATS)
    assert out.failure is None and [type(w) for w in out.warnings] == [GateInconclusive]
    with pytest.warns(GateInconclusive, match="undecided, MDE 3%") as rec:
        pytest_session.enforce(out)
    assert rec[0].filename == __file__
    strict = session(FakeGate(unsure="undecided, MDE 3%"), strict=True).gate_check(NODE, *INFO_STATS)
    assert strict.failure == "undecided, MDE 3%\n  (failing because of --perf-fail-on-inconclusive)"
    assert not strict.warnings


def test_other_hardware_is_incomparable_and_never_checked() -> None:
    gate = FakeGate(fail="never asked")
    out = session(gate, confirm=SimpleNamespace(foreign="incomparable: other CPU")).gate_check(NODE, *INFO_STATS)
    assert gate.seen == () and out.failure is None
    (w,) = out.warnings
    assert isinstance(w, GateIncomparable) and str(w) == "perfsuite gate: test_tpot[c]: incomparable: other CPU"


def test_changed_outputs_fail_the_test_whatever_its_timings_say() -> None:
    """A faster (or unchanged) run that generated other tokens fails as outputs changed, never passes as faster; the
    confirmation's word on its timings cannot take that back."""
    why = "outputs changed: prompt 0, token 17: 1234 in the baselines, 1235 in this run"
    out = session(FakeGate(changed=why)).gate_check(NODE, *INFO_STATS)
    assert out.failure == f"perfsuite gate: {why}"
    refuting = SimpleNamespace(foreign=None, review=lambda nodeid, verdicts, msg, unsure: (None, unsure, []))
    out = session(FakeGate(fail="perfsuite gate: significant regression", changed=why), confirm=refuting).gate_check(
        NODE, *INFO_STATS)
    assert out.failure == f"perfsuite gate: {why}"
    with pytest.raises(pytest.fail.Exception, match="token 17: 1234 in the baselines, 1235 in this run"):
        pytest_session.enforce(out)
