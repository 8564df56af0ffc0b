"""Root conftest: pytester for the plugin's own tests, and the hypothesis profiles (ci, nightly, gpu-smoke).

The perfsuite plugin itself loads through its pytest11 entry point.
"""

import pytest

from perfsuite.ops.profiles import ProfileError, load_profile, register_profiles

pytest_plugins = ["pytester"]

register_profiles()
try:  # at import, so that hypothesis' own --hypothesis-profile (applied at configure time) still wins
    load_profile()
    _PROFILE_ERROR: ProfileError | None = None
except ProfileError as exc:
    _PROFILE_ERROR = exc


def pytest_configure(config: pytest.Config) -> None:
    if _PROFILE_ERROR is not None:  # a mistyped PERFSUITE_HYPOTHESIS_PROFILE: one line, not a conftest traceback
        raise pytest.UsageError(f"perfsuite: {_PROFILE_ERROR}")
