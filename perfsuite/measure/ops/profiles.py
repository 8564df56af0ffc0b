"""Hypothesis profiles for the operator shape tests (docs/ops.md, "Running"): ``ci``, ``nightly`` (random, with a
database that replays failures found once first) and ``gpu-smoke``.

Selected by ``--hypothesis-profile NAME`` (hypothesis' own pytest option: the root conftest calls
:func:`register_profiles` at import time) or ``PERFSUITE_HYPOTHESIS_PROFILE``; default ``ci``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ENV = "PERFSUITE_HYPOTHESIS_PROFILE"


class ProfileError(ValueError):
    """An unknown profile name; the message names where it came from and the allowed profiles."""


DEFAULT = "ci"
NAMES = ("ci", "nightly", "gpu-smoke")

# Shape bounds (perfsuite.measure.ops.shapes.BOUNDS) a profile implies when the device does not decide it.
BOUNDS_OF = {"ci": "small", "nightly": "small", "gpu-smoke": "large"}
# Examples per (op, shape class) in the `perfsuite ops` sweep.
SWEEP_EXAMPLES = {"ci": 4, "nightly": 50, "gpu-smoke": 6}
# Examples per test in tests/ops.
MAX_EXAMPLES = {"ci": 6, "nightly": 200, "gpu-smoke": 10}


def _settings_kwargs(name: str) -> dict[str, Any]:
    from hypothesis import HealthCheck
    from hypothesis.database import DirectoryBasedExampleDatabase

    if name not in NAMES:
        raise ProfileError(f"unknown hypothesis profile {name!r}; use one of {', '.join(NAMES)}")
    quiet = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
             HealthCheck.differing_executors]
    db = os.environ.get("PERFSUITE_HYPOTHESIS_DB") or str(Path(".hypothesis") / "perfsuite-ops")
    return {"deadline": None, "print_blob": True, "suppress_health_check": quiet, "max_examples": MAX_EXAMPLES[name],
            "derandomize": name != "nightly",
            "database": DirectoryBasedExampleDatabase(db) if name == "nightly" else None}


def register_profiles() -> None:
    from hypothesis import settings

    for name in NAMES:
        settings.register_profile(name, **_settings_kwargs(name))


def selected(name: str | None = None, source: str | None = None) -> str:
    """``name``, else $PERFSUITE_HYPOTHESIS_PROFILE, else ``ci``; :class:`ProfileError` for anything else."""
    if name:
        source = source or "hypothesis profile"
    elif os.environ.get(ENV):
        name, source = os.environ[ENV], ENV
    else:
        return DEFAULT
    if name not in NAMES:
        raise ProfileError(f"{source}={name!r}: unknown hypothesis profile; use one of {', '.join(NAMES)}"
                           + (f" (or unset {ENV} for {DEFAULT})" if source == ENV else ""))
    return name


def load_profile(name: str | None = None) -> str:
    """Register all profiles and load ``name`` (else $PERFSUITE_HYPOTHESIS_PROFILE, else ci); returns the name."""
    from hypothesis import settings

    register_profiles()
    name = selected(name)
    settings.load_profile(name)
    return name
