"""pytest plugin (entry point ``pytest11: perfsuite``). Imports nothing heavy: backends load inside fixtures.

This module declares the options and forwards each hook and fixture to perfsuite.adapters.pytest.hooks, which builds and
runs the typed session (perfsuite.orchestrate.session); the outcomes (``pytest.UsageError``, ``pytest.exit``, a failed or
skipped test) are raised here, or, for a gate verdict, in the test itself (pytest_session.enforce).

Path from an option to a verdict: ``pytest_addoption`` -> ``pytest_configure`` resolves :class:`Settings`
(config.py) and the runner class, points pytest-benchmark's storage at ``baselines/<runner-class>/`` ->
``pytest_generate_tests`` parametrizes ``perf_cell`` with the profile's cells -> the first ``perf`` fixture has
every selected cell measured in fresh worker processes (harness.measure_plan; the workers time, this process
only spawns, orders and collects) -> harness.PerfRun records the workers' rounds in pytest-benchmark and asks the
gate (perfsuite.verdict) for a verdict -> ``pytest_sessionfinish`` records a baseline, atomically, only when asked
and only if the whole run passed.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from perfsuite.adapters.pytest import hooks as ps
from perfsuite.orchestrate.session import SESSION_KEY, PerfSession

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


def pytest_addoption(parser: pytest.Parser) -> None:
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
    from perfsuite.adapters.pytest import confirm_options as options

    options.add(group, parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before pytest-benchmark builds its session (its configure is trylast)."""
    config.addinivalue_line("markers", "perf: a perfsuite latency benchmark of one cell")
    try:
        ps.configure(config)
    except ps.Refused as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        ps.unconfigure(session)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is not None:
        ps.after_benchmark_configure(session.config, perf)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        machine_info["perfsuite"] = ps.machine_info(session)


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any],
                                          compared_benchmark: dict[str, Any]) -> None:
    why = ps.incomparable(machine_info, compared_benchmark)
    if why:
        raise pytest.UsageError(f"perfsuite: {why}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perf_cell" in metafunc.fixturenames:
        session = metafunc.config.stash[SESSION_KEY]
        cells = session.settings.cells()
        unfit = session.settings.unfit
        params = [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=unfit[c.id])] if c.id in unfit else [])
                  for c in cells]
        # module scope groups the tests of one cell together in the report
        metafunc.parametrize("perf_cell", params, scope="module")


@pytest.fixture(scope="session")
def perf_session(pytestconfig: pytest.Config) -> PerfSession:
    return pytestconfig.stash[SESSION_KEY]


@pytest.fixture(scope="session")
def perf_measurements(request: pytest.FixtureRequest, perf_session: PerfSession) -> dict[str, Any]:
    """Every selected cell, measured once per session in worker processes, in a random interleaved order."""
    try:
        return ps.measure(request, perf_session)
    except ps.Refused as exc:
        pytest.exit(f"perfsuite: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture
def perf(perf_session: PerfSession, perf_measurements: dict[str, Any], perf_cell: Any) -> Any:
    from perfsuite.orchestrate.plan import PerfRun

    res = perf_measurements.get(perf_cell.id)
    if res is None:  # pragma: no cover - every collected cell is planned
        pytest.fail(f"perfsuite: {perf_cell.id} was not measured", pytrace=False)
    if res.skip:
        pytest.skip(res.skip)
    if res.error:
        pytest.fail(f"perfsuite: {perf_cell.id}: {res.error}\n{res.detail}", pytrace=False)
    return PerfRun(perf_session, perf_cell, res)


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(SESSION_KEY, None)
    return [] if session is None else ps.report_header(session)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is None or perf.baseline_json is None:
        return
    from perfsuite.orchestrate.recording import finish_recording

    if not finish_recording(perf, int(exitstatus), bool(session.testsfailed)):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        ps.terminal_summary(terminalreporter, config, session)
