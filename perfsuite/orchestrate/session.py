"""Typed per-session state of the plugin, kept in ``config.stash``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfsuite.adapters.pytest import pbcompat
from perfsuite.facts.config import Settings

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
    sigterm: object | None = None  # the SIGTERM handler before this session turned SIGTERM into Ctrl-C (perfsuite.machine.signals)
    load: dict[str, Any] | None = None  # the load check before measuring (machine_info.perfsuite.preflight)
    peaks: dict[str, Any] | None = None  # bandwidth / FLOP/s measured at run start (roofline)
    confirm: Confirmation | None = None  # when comparing

    @property
    def runner_class(self) -> str:
        return self.settings.runner_class

    @property
    def baseline_dir(self) -> Path:
        from perfsuite.orchestrate import baselines

        return baselines.class_dir(self.settings.config.baselines_dir, self.runner_class)

    def gate_check(self, nodeid: str, benchmark: Any) -> GateOutcome:
        """What the gate makes of the calling test: a failure when it finds a significant regression beyond its
        threshold; an inconclusive verdict is a warning (with the A/B that would settle it), or a failure when
        asked. The caller raises it in the test (perfsuite.adapters.pytest.hooks.enforce)."""
        if self.gate is None:
            return GateOutcome()
        if self.confirm is not None and self.confirm.foreign:
            return GateOutcome(warnings=[
                GateIncomparable(f"perfsuite gate: {nodeid.split('::')[-1]}: {self.confirm.foreign}")])
        verdicts = self.gate.check(nodeid, benchmark.extra_info, pbcompat.stats_dict(benchmark))
        msg = self.gate.failure_message(verdicts)
        unsure = self.gate.inconclusive_message(nodeid, verdicts)
        said: list[Warning] = []
        if self.confirm is not None:  # a screened regression counts only once an A/B on this machine confirms it
            msg, unsure, said = self.confirm.review(nodeid, verdicts, msg, unsure)
        if msg:
            return GateOutcome(failure=msg, warnings=said)
        if unsure and self.fail_on_inconclusive:
            return GateOutcome(failure=unsure + "\n  (failing because of --perf-fail-on-inconclusive)", warnings=said)
        return GateOutcome(warnings=said + ([GateInconclusive(unsure)] if unsure else []))


@dataclass(frozen=True)
class GateOutcome:
    """The word on one test: skip it with ``skip`` (nothing measured it, and the worker said why), fail it with
    ``failure``, else pass it with ``warnings``. perfsuite.adapters.pytest.hooks.enforce raises it."""

    failure: str | None = None
    warnings: list[Warning] = field(default_factory=list)
    skip: str | None = None


class GateInconclusive(UserWarning):
    """The stored baselines could not decide a gated metric of this test (see the message for the MDE and the
    `perfsuite ab` command that would)."""


class GateDrift(UserWarning):
    """The stored baselines flagged a regression that an A/B against the baselines' commit refuted: this machine
    runs slower or faster than when the baselines were recorded (the message says by how much and what to do)."""


class GateUnconfirmed(UserWarning):
    """A stored-baseline regression that could not be confirmed (the reason and the fix); with
    ``on_unconfirmed = "warn"`` it passes with this warning."""


class GateIncomparable(UserWarning):
    """Nothing compared: the baselines were recorded on other hardware (a forced runner class)."""


SESSION_KEY = pytest.StashKey[PerfSession]()
