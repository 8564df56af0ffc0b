"""The confirmation's keys of ``[tool.perfsuite.gate]``, parsed with the rest of the gate's table (their meaning and
defaults: docs/gate.md, "Configuration")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfsuite.facts.schema import Field, duration_s


@dataclass(frozen=True)
class ConfirmConfig:
    enabled: bool = True
    budget_s: float = 180.0
    session_budget_s: float = 600.0
    on_unconfirmed: str = "fail"
    python: str | None = None
    threads: str = "auto"  # perfsuite.machine.cotenant.MODES
    suspected_budget_s: float = 120.0  # an A/B of suspected screens only (no screened regression in the session)

    def budget_for(self, n_cells: int) -> float:
        return min(self.budget_s * max(n_cells, 1), self.session_budget_s)


FIELDS = {
    "confirm": Field("bool", "A/B-confirm a stored-baseline regression in the same session"),
    "confirm_budget": Field("duration", "wall time per regressed cell"),
    "confirm_session_budget": Field("duration", "cap for all cells of one session together"),
    "on_unconfirmed": Field("str", "a screened regression nobody could confirm or refute", choices=("fail", "warn")),
    "confirm_python": Field("str", "interpreter for A when its library versions differ"),
    "confirm_threads": Field("str", "OpenMP threads of both sides (perfsuite.machine.cotenant)", choices=("auto", "cell")),
    "confirm_suspected_budget": Field("duration", "wall time of an A/B of suspected (inconclusive) screens only"),
}
KEYS = frozenset(FIELDS)


def parse(raw: Mapping[str, Any], error: Any) -> ConfirmConfig:
    """``error(key, got, allowed, fix="")`` builds the gate's PolicyError."""
    got = {}
    for key, default in zip(FIELDS, (True, "3m", "10m", "fail", "", "auto", "2m"), strict=True):
        v = raw.get(key, default)
        if FIELDS[key].problem(v):
            raise error(key, v, FIELDS[key].expects() if key != "confirm_python" else "a path to a python interpreter")
        got[key] = v
    return ConfirmConfig(got["confirm"], duration_s(got["confirm_budget"]) or 0.0,
                         duration_s(got["confirm_session_budget"]) or 0.0, got["on_unconfirmed"],
                         got["confirm_python"] or None, got["confirm_threads"],
                         duration_s(got["confirm_suspected_budget"]) or 0.0)
