"""Root conftest: pytester for the plugin's own tests, the hypothesis profiles (ci, nightly, gpu-smoke), Ctrl-C
restored when the run was started with SIGINT ignored, and tests/perf (the product's benchmark) in the slow tier of
the project's own tests unless it is asked for.

The perfsuite plugin itself loads through its pytest11 entry point. Nothing of perfsuite is imported at module level
here: pytest-benchmark's own CLI (``pytest-benchmark compare``) imports this file *before* it builds a pytest Config
from pyproject.toml, and pytest then warns that the already-imported perfsuite plugin cannot be assertion-rewritten
(an error under ``filterwarnings = error``).
"""

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PERF = Path(__file__).resolve().parent / "tests" / "perf"
# A bare `pytest` given one of these asks for the benchmark itself (README: `pytest --benchmark-compare` finds this
# machine's baselines): tests/perf stays in the selected tier then, as before.
PERF_ACTIONS = ("benchmark_compare", "benchmark_save", "benchmark_autosave", "benchmark_json", "perf_update_baselines")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before hypothesis' own configure: register our profiles (so ``--hypothesis-profile ci`` resolves) and load the
    selected one; hypothesis then applies ``--hypothesis-profile``, which still wins."""
    import os
    import signal

    if hasattr(config, "workerinput"):
        # An xdist worker of the project's own tests (`pytest -n auto`). xdist tells user code so in the
        # environment, which every process a test starts inherits; pytest-benchmark then disables its benchmarks in
        # the pytest runs those tests start ("xdist plugin is active"). Those runs are not distributed.
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            os.environ.pop(name, None)
        # The runs those tests start measure side by side on purpose (their timings are not asserted): one suite
        # lock per worker, so that one worker's run does not wait for another's (perfsuite.machine.preflight).
        if not os.environ.get("PERFSUITE_LOCK_DIR"):
            import tempfile

            lock_dir = Path(tempfile.mkdtemp(prefix=f"perfsuite-lock-{config.workerinput['workerid']}-"))
            os.environ["PERFSUITE_LOCK_DIR"] = str(lock_dir)
            config.add_cleanup(lambda: shutil.rmtree(lock_dir, ignore_errors=True))
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


def _perf_asked_for(config: pytest.Config) -> bool:
    """tests/perf (or a file or test in it) named on the command line (``pytest tests/perf``, ``perfsuite run``, a
    nightly shard), or a benchmark action asked of a bare ``pytest``."""
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        for arg in config.args:
            path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
            if path == PERF or PERF in path.parents:
                return True
    return any(config.getoption(name, default=None) for name in PERF_ACTIONS)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before ``-m`` deselects: tests/perf measures the smoke profile's matrix in ~22 worker processes (more than a
    minute on 2 cores), an end-to-end run of the product, so the project's own ``pytest`` (testpaths) puts it in the
    slow tier. ``pytest tests/perf``, ``perfsuite run`` and ``pytest --benchmark-compare`` run it as before, and
    ``pytest -m slow`` runs it with the other end-to-end runs."""
    if _perf_asked_for(config):
        return
    for item in items:
        if item.path.is_relative_to(PERF):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.alone)  # the product's run: its timings with nothing beside it
