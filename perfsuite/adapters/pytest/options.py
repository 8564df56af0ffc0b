"""The plugin's options (``pytest --help``, group perfsuite) and how each is read: CLI > env > ini > default."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from perfsuite.facts import config as cfg

_OPTIONS = (
    # flag, ini/env suffix, help
    ("--perf-backend", "backend", "comma-separated backends to run (default: the profile's)"),
    ("--perf-model", "model",
     "comma-separated models: presets, checkpoint dirs or cached hub ids (default: the profile's)"),
    ("--perf-profile", "profile", "smoke | pr | nightly (default: smoke)"),
    ("--perf-device", "device", "cpu | cuda; a ROCm GPU is 'cuda' in torch (default: cpu)"),
    ("--perf-runner-class", "runner_class", "override the detected runner class that names the baseline folder"),
    ("--perf-workers", "workers", "fresh worker processes per cell (0 = measure in the pytest process; default: "
                                  "the profile's worker_processes)"),
)


def _given(value: str) -> str:
    """An option written with an empty value (``--perf-workers=``) is refused, not read as "use the default"."""
    if not value.strip():
        raise argparse.ArgumentTypeError("empty; give a value or leave the option out")
    return value


def add(parser: pytest.Parser) -> None:
    """The plugin's options (group perfsuite), each with its env and ini name."""
    group = parser.getgroup("perfsuite", "perfsuite: LLM inference latency benchmarks")
    for flag, key, help_ in _OPTIONS:
        group.addoption(flag, dest=f"perf_{key}", default=None, type=_given, help=f"{help_}. Env "
                        f"PERFSUITE_{key.upper()}, ini perfsuite_{key}.")
        parser.addini(f"perfsuite_{key}", help_, default=None)
    group.addoption("--perf-update-baselines", dest="perf_update_baselines", action="store_true", default=None,
                    help="record this run as a new baseline in baselines/<runner-class>/ (atomic; written only if "
                         "every test passed). Env PERFSUITE_UPDATE_BASELINES=1, ini perfsuite_update_baselines.")
    parser.addini("perfsuite_update_baselines", "record a new baseline", type="bool", default=False)
    group.addoption("--perf-fail-on-inconclusive", dest="perf_fail_on_inconclusive", action="store_true",
                    default=None, help="with --benchmark-compare: fail a test whose gate verdict is inconclusive "
                    "(default: a warning naming the MDE and the `perfsuite ab` command that would settle it). Env "
                    "PERFSUITE_FAIL_ON_INCONCLUSIVE=1, ini perfsuite_fail_on_inconclusive.")
    parser.addini("perfsuite_fail_on_inconclusive", "fail inconclusive gate verdicts", type="bool", default=False)
    group.addoption("--perf-gate-json", dest="perf_gate_json", default=None, metavar="PATH",
                    help="with --benchmark-compare: also write every gate verdict to PATH as JSON (for CI artifacts)")
    group.addoption("--perf-confirm-inconclusive", dest="perf_confirm_inconclusive", action="store_true",
                    default=None, help="with --benchmark-compare: A/B-confirm every test whose stored-baseline "
                    "verdict is inconclusive (regressions are always confirmed; by default an inconclusive one is "
                    "when its interval reaches beyond its threshold and its cell's A/B pairs are cheap). Env "
                    "PERFSUITE_CONFIRM_INCONCLUSIVE=1, ini perfsuite_confirm_inconclusive.")
    parser.addini("perfsuite_confirm_inconclusive", "A/B-confirm inconclusive gate verdicts", type="bool",
                  default=False)
    group.addoption("--perf-screen-only", dest="perf_screen_only", action="store_true", default=None,
                    help="with --benchmark-compare: A/B-confirm screened regressions only; an inconclusive screen stays "
                    "a warning (the default confirms the suspected ones). Env PERFSUITE_SCREEN_ONLY=1, ini "
                    "perfsuite_screen_only.")
    parser.addini("perfsuite_screen_only", "A/B-confirm screened regressions only", type="bool", default=False)
    group.addoption("--perf-confirm-python", dest="perf_confirm_python", default=None, metavar="PY",
                    help="interpreter for A (the baselines' commit) in the confirmation A/B, when the baselines' "
                    "library versions differ from this environment's (default: [tool.perfsuite.gate] confirm_python)")
    group.addoption("--perf-allow-foreign-hardware", dest="perf_allow_foreign_hardware", action="store_true",
                    default=False, help="with a forced runner class: compare against baselines recorded on another "
                    "CPU model / instruction sets / GPU arch anyway (default: incomparable, nothing fails)")


def flag(config: pytest.Config, key: str) -> bool:
    return bool(config.getoption(f"perf_{key}") or os.environ.get(f"PERFSUITE_{key.upper()}") == "1"
                or config.getini(f"perfsuite_{key}"))


def opt(config: pytest.Config, key: str, default: Any) -> Any:
    return cfg.pick(config.getoption(f"perf_{key}"), f"PERFSUITE_{key.upper()}", config.getini(f"perfsuite_{key}"),
                    default)


def confirmation(config: pytest.Config, ps: Any) -> Any:
    """The session's confirmation state, from the confirmation's options."""
    from perfsuite.orchestrate.confirm import session

    gate_json = config.getoption("perf_gate_json")
    return session.start(ps, confirm_inconclusive=flag(config, "confirm_inconclusive"),
                         screen_only=flag(config, "screen_only"),
                         out_dir=Path(gate_json).resolve().parent if gate_json else None,
                         python=config.getoption("perf_confirm_python"),
                         allow_foreign=bool(config.getoption("perf_allow_foreign_hardware")))
