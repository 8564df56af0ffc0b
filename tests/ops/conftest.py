"""Operator shape tests: hypothesis profile, runner class, known gaps, and a summary of new/known/fixed gaps.

The hypothesis profile is ``--hypothesis-profile`` (once the root conftest registers ours, see
perfsuite/measure/ops/profiles.py) or ``PERFSUITE_HYPOTHESIS_PROFILE`` (default ``ci``).
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import pytest

from perfsuite.measure.ops import known_gaps, profiles

profiles.register_profiles()
if not os.environ.get("_PERFSUITE_OPS_PROFILE_FROM_CLI"):
    # --hypothesis-profile (hypothesis' pytest plugin) is applied at configure time, before this file loads, and
    # only works if the root conftest registered the profiles; honour the env variable here otherwise.
    from hypothesis import settings as _s

    if getattr(_s, "_current_profile", "default") not in profiles.NAMES:
        try:
            profiles.load_profile()
        except profiles.ProfileError:
            pass  # the root conftest reports it as one usage line at configure time


class GapLog:
    def __init__(self) -> None:
        self.statuses: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
        self.gaps: list[known_gaps.Gap] = []
        self.runner_class = ""
        self.characterised = True
        self.scope = ""  # GapSet.describe()
        self.features = ""  # GapSet.features: the feature set the gaps were decided for
        self.injected = False  # decided for PERFSUITE_CPU_FLAGS, not for this CPU
        self.uncharacterised: dict[tuple[str, str, str, str], str] = {}  # cell -> first detail

    def note_uncharacterised(self, op: str, backend: str, dtype: str, shape_class: str, detail: str) -> None:
        self.uncharacterised.setdefault((op, backend, dtype, shape_class), detail)

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
INJECTED_FIX = "under injected CPU flags this CPU's kernels ran, not the injected CPU's: keep the entry"


def _runner_class(config: pytest.Config) -> str:
    """The perf suite's runner class: --perf-runner-class > PERFSUITE_RUNNER_CLASS > ini > detected (CPU)."""
    from perfsuite.facts import config as cfg

    try:
        override = cfg.pick(config.getoption("perf_runner_class"), "PERFSUITE_RUNNER_CLASS",
                            config.getini("perfsuite_runner_class"), None)
    except ValueError:  # the perfsuite plugin is not loaded
        override = None
    if override:
        return str(override)
    from perfsuite.machine.runner_class import detect

    try:
        return detect("cpu")[0]
    except ValueError as exc:  # a malformed PERFSUITE_CPU_FLAGS (the plugin, if loaded, said so already)
        raise pytest.UsageError(f"perfsuite: {exc}") from None


@pytest.fixture(scope="session")
def ops_gaps(pytestconfig: pytest.Config) -> GapLog:
    LOG.runner_class = _runner_class(pytestconfig)
    try:
        found = known_gaps.for_runner(LOG.runner_class, known_gaps.directory_for(pytestconfig.rootpath))
    except known_gaps.KnownGapsError as exc:
        pytest.fail(f"perfsuite: {exc}", pytrace=False)
    LOG.gaps, LOG.characterised, LOG.scope = list(found.gaps), found.characterised, found.describe()
    LOG.features, LOG.injected = found.features, bool(found.env and found.env.cpu_flags_injected)
    return LOG


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not LOG.statuses:
        return
    known = {k: s for k, s in LOG.statuses.items() if s - {"pass"}}
    fixed = LOG.fixed()
    tr = terminalreporter
    tr.section(f"operator gaps ({LOG.runner_class})")
    tr.write_line(LOG.scope)
    tr.write_line(f"{len(LOG.statuses)} (op, backend, dtype, shape class) cells exercised; {len(known)} with a "
                  "non-pass status (known gaps, or failures above)")
    for g in fixed:
        fix = INJECTED_FIX if LOG.injected else f"delete the entry from {g.source}"
        tr.write_line(f"FIXED known gap {g.label()} ({g.reason}): every matching example passed; {fix}")
    if LOG.uncharacterised:
        tr.write_line(f"not yet characterised on {LOG.features}: {len(LOG.uncharacterised)} non-pass cell(s) that "
                      "no known gap matches, reported, not failed (`perfsuite ops --strict` fails them); review "
                      f"them, then record the real gaps in baselines/known_gaps/{LOG.runner_class}.toml (perfsuite "
                      "ops --write-known-gaps) or add the feature set to characterised_on (docs/ops.md)")
        for (op, backend, dtype, shape_class), detail in sorted(LOG.uncharacterised.items()):
            tr.write_line(f"  NOT CHARACTERISED {op}/{shape_class}/{backend}/{dtype}: {detail[:200]}")
