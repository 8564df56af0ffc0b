"""Hypothesis profiles for the operator shape tests.

* ``ci``        derandomized (same examples every run), few examples, no example database: fast and stable.
* ``nightly``   many examples, random, with a directory example database so failures found once are replayed
                first on the next night (``.hypothesis/perfsuite-ops``, or ``$PERFSUITE_HYPOTHESIS_DB``).
* ``gpu-smoke`` derandomized, a handful of examples, large (GPU) shape bounds.

Selection: ``--hypothesis-profile NAME`` (hypothesis' own pytest option; needs :func:`register_profiles` to have
run at conftest import time) or ``PERFSUITE_HYPOTHESIS_PROFILE``; default ``ci``. The lead wires it with::

    # conftest.py (repository root), at import time
    from perfsuite.measure.ops.profiles import register_profiles, load_profile
    register_profiles()
    load_profile()          # env / default; a --hypothesis-profile option given to pytest wins afterwards
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


def _settings_kwargs(name: str) -> dict[str, Any]:
    from hypothesis import HealthCheck
    from hypothesis.database import DirectoryBasedExampleDatabase

    quiet = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
             HealthCheck.differing_executors]
    common: dict[str, Any] = {"deadline": None, "print_blob": True, "suppress_health_check": quiet}
    if name == "ci":
        return {**common, "max_examples": 6, "derandomize": True, "database": None}
    if name == "nightly":
        db = os.environ.get("PERFSUITE_HYPOTHESIS_DB") or str(Path(".hypothesis") / "perfsuite-ops")
        return {**common, "max_examples": 200, "derandomize": False,
                "database": DirectoryBasedExampleDatabase(db)}
    if name == "gpu-smoke":
        return {**common, "max_examples": 10, "derandomize": True, "database": None}
    raise ProfileError(f"unknown hypothesis profile {name!r}; use one of {', '.join(NAMES)}")


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
