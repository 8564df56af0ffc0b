"""pytest plugin (entry point ``pytest11: perfsuite``). Imports nothing heavy: backends load inside fixtures.

This module declares the hooks and fixtures and forwards each to perfsuite.adapters.pytest (options, hooks, record),
which builds and runs the typed session (perfsuite.orchestrate.session); the outcomes (``pytest.UsageError``,
``pytest.exit``, a failed or skipped test) are raised here, or, for a gate verdict, in the test itself (hooks.enforce).
The path from an option to a verdict, file by file: docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from perfsuite.adapters.pytest import hooks as ps
from perfsuite.adapters.pytest import options
from perfsuite.adapters.pytest.hooks import SESSION_KEY
from perfsuite.orchestrate.session import PerfSession


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser)


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
        unfit = session.settings.unfit
        params = [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=unfit[c.id])] if c.id in unfit else [])
                  for c in session.settings.cells()]
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
    from perfsuite.adapters.pytest.record import PerfRun

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
    from perfsuite.adapters.pytest import pbcompat
    from perfsuite.orchestrate.recording import finish_recording

    if not finish_recording(perf, int(exitstatus), bool(session.testsfailed), pbcompat.get_tag()):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        ps.terminal_summary(terminalreporter, config, session)
