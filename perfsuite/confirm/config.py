"""The confirmation's keys of ``[tool.perfsuite.gate]`` (parsed with the rest of the gate's table)::

    [tool.perfsuite.gate]
    confirm = true                 # A/B-confirm a stored-baseline regression in the same session (default true)
    confirm_budget = "3m"          # wall time per regressed cell
    confirm_session_budget = "10m" # cap for all cells of one session together (they share one A/B)
    on_unconfirmed = "fail"        # "fail" | "warn": a screened regression nobody could confirm or refute
    confirm_python = ""            # interpreter for A (the baseline's commit) when its library versions differ
    confirm_threads = "auto"       # "auto": beside a co-tenant both sides run with fewer OpenMP threads
                                   # (perfsuite.cotenant); "cell": every cell at its own default
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KEYS = frozenset({"confirm", "confirm_budget", "confirm_session_budget", "on_unconfirmed", "confirm_python",
                  "confirm_threads"})
ON_UNCONFIRMED = ("fail", "warn")


@dataclass(frozen=True)
class ConfirmConfig:
    enabled: bool = True
    budget_s: float = 180.0
    session_budget_s: float = 600.0
    on_unconfirmed: str = "fail"
    python: str | None = None
    threads: str = "auto"  # perfsuite.cotenant.MODES

    def budget_for(self, n_cells: int) -> float:
        return min(self.budget_s * max(n_cells, 1), self.session_budget_s)


def parse(raw: Mapping[str, Any], error: Any) -> ConfirmConfig:
    """``error(key, got, allowed, fix="")`` builds the gate's PolicyError."""
    from perfsuite.commands._common import parse_duration
    from perfsuite.errors import UsageError

    enabled = raw.get("confirm", True)
    if not isinstance(enabled, bool):
        raise error("confirm", enabled, "true or false")
    durations = {}
    for key, default in (("confirm_budget", "3m"), ("confirm_session_budget", "10m")):
        v = raw.get(key, default)
        try:
            durations[key] = parse_duration(str(v), key) if isinstance(v, (str, int, float)) else -1.0
        except UsageError:
            durations[key] = -1.0
        if durations[key] <= 0 or isinstance(v, bool):
            raise error(key, v, 'a duration such as "90s", "3m" or "1h"')
    policy = raw.get("on_unconfirmed", "fail")
    if policy not in ON_UNCONFIRMED:
        raise error("on_unconfirmed", policy, " | ".join(ON_UNCONFIRMED))
    python = raw.get("confirm_python", "") or None
    if python is not None and not isinstance(python, str):
        raise error("confirm_python", python, "a path to a python interpreter")
    threads = raw.get("confirm_threads", "auto")
    if threads not in ("auto", "cell"):
        raise error("confirm_threads", threads, "auto | cell")
    return ConfirmConfig(enabled, durations["confirm_budget"], durations["confirm_session_budget"], policy, python,
                         threads)
