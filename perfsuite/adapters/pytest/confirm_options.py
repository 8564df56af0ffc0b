"""The confirmation's pytest options (group perfsuite), read once at gate setup."""

from __future__ import annotations

from typing import Any


def add(group: Any, parser: Any) -> None:
    group.addoption("--perf-confirm-inconclusive", dest="perf_confirm_inconclusive", action="store_true",
                    default=None, help="with --benchmark-compare: also A/B-confirm tests whose stored-baseline "
                    "verdict is inconclusive (regressions are always confirmed). Env PERFSUITE_CONFIRM_INCONCLUSIVE=1, "
                    "ini perfsuite_confirm_inconclusive.")
    parser.addini("perfsuite_confirm_inconclusive", "A/B-confirm inconclusive gate verdicts", type="bool",
                  default=False)
    group.addoption("--perf-confirm-python", dest="perf_confirm_python", default=None, metavar="PY",
                    help="interpreter for A (the baselines' commit) in the confirmation A/B, when the baselines' "
                    "library versions differ from this environment's (default: [tool.perfsuite.gate] confirm_python)")
    group.addoption("--perf-allow-foreign-hardware", dest="perf_allow_foreign_hardware", action="store_true",
                    default=False, help="with a forced runner class: compare against baselines recorded on another "
                    "CPU model / instruction sets / GPU arch anyway (default: incomparable, nothing fails)")


def start(config: Any, ps: Any) -> Any:
    from perfsuite.adapters.pytest.hooks import _flag
    from perfsuite.orchestrate.confirm import session

    return session.start(ps, confirm_inconclusive=_flag(config, "confirm_inconclusive"),
                         python=config.getoption("perf_confirm_python"),
                         allow_foreign=bool(config.getoption("perf_allow_foreign_hardware")))
