"""Typed per-session state of the plugin, kept in ``config.stash``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from perfsuite.config import Settings


@dataclass
class PerfSession:
    settings: Settings
    facts: dict[str, Any]
    baseline_json: Path | None = None  # temp --benchmark-json when recording baselines
    gate_config: Any = None  # perfsuite.gate.GateConfig from [tool.perfsuite.gate]
    gate: Any = None  # perfsuite.gate.GateSession when comparing
    notes: list[str] = field(default_factory=list)
    fail_on_inconclusive: bool = False
    lock: Any = None  # perfsuite.preflight.SuiteLock held exclusively while recording a baseline
    load: dict[str, Any] | None = None  # the load check before measuring (machine_info.perfsuite.preflight)
    peaks: dict[str, Any] | None = None  # bandwidth / FLOP/s measured at run start (roofline)

    @property
    def runner_class(self) -> str:
        return self.settings.runner_class

    @property
    def baseline_dir(self) -> Path:
        from perfsuite import baselines

        return baselines.class_dir(self.settings.config.baselines_dir, self.runner_class)

    def gate_check(self, nodeid: str, benchmark: Any) -> None:
        """Fail the calling test itself when the gate finds a significant regression beyond its threshold; an
        inconclusive verdict is a visible warning (with the A/B that would settle it), or a failure when asked."""
        if self.gate is None:
            return
        verdicts = self.gate.check(nodeid, benchmark.extra_info, benchmark.stats.stats.as_dict())
        msg = self.gate.failure_message(verdicts)
        if msg:
            pytest.fail(msg, pytrace=False)
        unsure = self.gate.inconclusive_message(nodeid, verdicts)
        if unsure and self.fail_on_inconclusive:
            pytest.fail(unsure + "\n  (failing because of --perf-fail-on-inconclusive)", pytrace=False)
        if unsure:
            warnings.warn(GateInconclusive(unsure), stacklevel=2)


class GateInconclusive(UserWarning):
    """The stored baselines could not decide a gated metric of this test (see the message for the MDE and the
    `perfsuite ab` command that would)."""


SESSION_KEY = pytest.StashKey[PerfSession]()
