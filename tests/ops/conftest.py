"""Operator shape tests: hypothesis profile, runner class, known gaps, and a summary of new/known/fixed gaps.

The hypothesis profile is ``--hypothesis-profile`` (once the root conftest registers ours, see
perfsuite/ops/profiles.py) or ``PERFSUITE_HYPOTHESIS_PROFILE`` (default ``ci``).
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import pytest

from perfsuite.ops import known_gaps, profiles

profiles.register_profiles()
if not os.environ.get("_PERFSUITE_OPS_PROFILE_FROM_CLI"):
    # --hypothesis-profile (hypothesis' pytest plugin) is applied at configure time, before this file loads, and
    # only works if the root conftest registered the profiles; honour the env variable here otherwise.
    from hypothesis import settings as _s

    if getattr(_s, "_current_profile", "default") not in profiles.NAMES:
        profiles.load_profile()


class GapLog:
    def __init__(self) -> None:
        self.statuses: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
        self.gaps: list[known_gaps.Gap] = []
        self.runner_class = ""

    def record(self, op: str, backend: str, dtype: str, shape_class: str, status: str) -> None:
        self.statuses[(op, backend, dtype, shape_class)].add(status)

    def fixed(self) -> list[known_gaps.Gap]:
        out = []
        for g in self.gaps:
            seen = [s for k, ss in self.statuses.items() if g.matches(*k) for s in ss]
            if seen and all(s == "pass" for s in seen):
                out.append(g)
        return out


LOG = GapLog()


def _runner_class(config: pytest.Config) -> str:
    try:
        override = config.getoption("perf_runner_class")
    except ValueError:
        override = None
    if override:
        return str(override)
    from perfsuite.runner_class import detect

    return detect("cpu")[0]


@pytest.fixture(scope="session")
def ops_gaps(pytestconfig: pytest.Config) -> GapLog:
    LOG.runner_class = _runner_class(pytestconfig)
    LOG.gaps = known_gaps.load(pytestconfig.rootpath / known_gaps.path_for(LOG.runner_class))
    return LOG


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not LOG.statuses:
        return
    known = {k: s for k, s in LOG.statuses.items() if s - {"pass"}}
    fixed = LOG.fixed()
    tr = terminalreporter
    tr.section(f"operator gaps ({LOG.runner_class})")
    tr.write_line(f"{len(LOG.statuses)} (op, backend, dtype, shape class) cells exercised; {len(known)} with a "
                  "non-pass status (known gaps, or failures above)")
    for g in fixed:
        tr.write_line(f"FIXED known gap {g.label()} ({g.reason}): every matching example passed; delete the entry "
                      f"from baselines/known_gaps/{LOG.runner_class}.toml")
