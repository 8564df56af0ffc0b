"""The typed state of one pytest session that measures (the pytest adapter keeps it in ``config.stash``), and the
word of the gate and the confirmation on each of its tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.facts.config import Settings
from perfsuite.orchestrate import baselines
from perfsuite.verdict.outcome import GateIncomparable, GateInconclusive, GateOutcome

if TYPE_CHECKING:  # the plugin imports this module: nothing heavy at run time
    from perfsuite.machine.preflight import SuiteLock
    from perfsuite.orchestrate.confirm.session import Confirmation
    from perfsuite.verdict.policy import GateConfig
    from perfsuite.verdict.screen import GateSession


@dataclass
class PerfSession:
    settings: Settings
    facts: dict[str, Any]
    gate_config: GateConfig  # from [tool.perfsuite.gate]
    baseline_json: Path | None = None  # temp --benchmark-json when recording baselines
    gate: GateSession | None = None  # when comparing
    notes: list[str] = field(default_factory=list)
    fail_on_inconclusive: bool = False
    lock: SuiteLock | None = None  # held exclusively while recording a baseline
    sigterm: object | None = None  # the SIGTERM handler before this session turned SIGTERM into Ctrl-C
    load: dict[str, Any] | None = None  # the load check before measuring (machine_info.perfsuite.preflight)
    peaks: dict[str, Any] | None = None  # bandwidth / FLOP/s measured at run start (roofline)
    confirm: Confirmation | None = None  # when comparing

    @property
    def runner_class(self) -> str:
        return self.settings.runner_class

    @property
    def baseline_dir(self) -> Path:
        return baselines.class_dir(self.settings.config.baselines_dir, self.runner_class)

    def gate_check(self, nodeid: str, extra_info: dict[str, Any], stats: dict[str, Any]) -> GateOutcome:
        """What the gate makes of the calling test (its ``extra_info`` and ``stats`` as recorded): a failure for a
        significant regression beyond its threshold; an inconclusive verdict is a warning (with the A/B that would
        settle it), or a failure when asked. The pytest adapter raises the outcome in the test."""
        if self.gate is None:
            return GateOutcome()
        if self.confirm is not None and self.confirm.foreign:
            return GateOutcome(warnings=[
                GateIncomparable(f"perfsuite gate: {nodeid.split('::')[-1]}: {self.confirm.foreign}")])
        verdicts = self.gate.check(nodeid, extra_info, stats)
        msg = self.gate.failure_message(verdicts)
        unsure = self.gate.inconclusive_message(nodeid, verdicts)
        said: list[Warning] = []
        if self.confirm is not None:  # a screened regression counts only once an A/B on this machine confirms it
            msg, unsure, said = self.confirm.review(nodeid, verdicts, msg, unsure)
        changed = self.gate.outputs(nodeid, extra_info)
        if changed.kind == "changed":  # other tokens fail the test, faster or not (perfsuite.verdict.outputs)
            msg = f"perfsuite gate: {changed.message}" + (f"\n{msg}" if msg else "")
        if msg:
            return GateOutcome(failure=msg, warnings=said)
        if unsure and self.fail_on_inconclusive:
            return GateOutcome(failure=unsure + "\n  (failing because of --perf-fail-on-inconclusive)", warnings=said)
        return GateOutcome(warnings=said + ([GateInconclusive(unsure)] if unsure else []))
