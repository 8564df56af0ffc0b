"""Root conftest: pytester for the plugin's own tests, the hypothesis profiles (ci, nightly, gpu-smoke), and Ctrl-C
restored when the run was started with SIGINT ignored.

The perfsuite plugin itself loads through its pytest11 entry point. Nothing of perfsuite is imported at module level
here: pytest-benchmark's own CLI (``pytest-benchmark compare``) imports this file *before* it builds a pytest Config
from pyproject.toml, and pytest then warns that the already-imported perfsuite plugin cannot be assertion-rewritten
(an error under ``filterwarnings = error``).
"""

import pytest

pytest_plugins = ["pytester"]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before hypothesis' own configure: register our profiles (so ``--hypothesis-profile ci`` resolves) and load the
    selected one; hypothesis then applies ``--hypothesis-profile``, which still wins."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # A shell without job control starts background jobs with SIGINT ignored, and every child inherits that:
        # the tests that press Ctrl-C on a child (a server, a tool, a worker, a run) would then wait for nothing.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    from perfsuite.measure.ops.profiles import ProfileError, load_profile, register_profiles

    register_profiles()
    try:
        load_profile()
    except ProfileError as exc:  # a mistyped PERFSUITE_HYPOTHESIS_PROFILE: one line, not a conftest traceback
        raise pytest.UsageError(f"perfsuite: {exc}") from None
