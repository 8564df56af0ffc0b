"""Typed per-session state of the plugin, kept in ``config.stash``."""

from __future__ import annotations

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

    @property
    def runner_class(self) -> str:
        return self.settings.runner_class

    @property
    def baseline_dir(self) -> Path:
        return self.settings.config.baselines_dir / self.runner_class

    def gate_check(self, nodeid: str, benchmark: Any) -> None:
        """Fail the calling test itself when the gate finds a significant regression beyond its threshold."""
        if self.gate is None:
            return
        fullname = nodeid
        verdicts = self.gate.check(fullname, benchmark.extra_info, benchmark.stats.stats.as_dict())
        msg = self.gate.failure_message(verdicts)
        if msg:
            pytest.fail(msg, pytrace=False)


SESSION_KEY = pytest.StashKey[PerfSession]()
