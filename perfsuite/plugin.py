"""pytest plugin (entry point ``pytest11: perfsuite``). Imports nothing heavy: backends load inside fixtures.

Path from an option to a verdict: ``pytest_addoption`` -> ``pytest_configure`` resolves :class:`Settings`
(config.py) and the runner class, points pytest-benchmark's storage at ``baselines/<runner-class>/`` ->
``pytest_generate_tests`` parametrizes ``perf_cell`` with the profile's cells -> the first ``perf`` fixture has
every selected cell measured in fresh worker processes (harness.measure_plan; the workers time, this process
only spawns, orders and collects) -> harness.PerfRun records the workers' rounds in pytest-benchmark and asks the
gate (perfsuite.gate) for a verdict -> ``pytest_sessionfinish`` records a baseline, atomically, only when asked
and only if the whole run passed.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from perfsuite import baselines, pbcompat, runner_class
from perfsuite import config as cfg
from perfsuite.session import SESSION_KEY, PerfSession

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
    from perfsuite.confirm import options

    options.add(group, parser)


def _flag(config: pytest.Config, key: str) -> bool:
    return bool(config.getoption(f"perf_{key}") or os.environ.get(f"PERFSUITE_{key.upper()}") == "1"
                or config.getini(f"perfsuite_{key}"))


def _opt(config: pytest.Config, key: str, default: Any) -> Any:
    return cfg.pick(config.getoption(f"perf_{key}"), f"PERFSUITE_{key.upper()}", config.getini(f"perfsuite_{key}"),
                    default)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before pytest-benchmark builds its session (its configure is trylast)."""
    config.addinivalue_line("markers", "perf: a perfsuite latency benchmark of one cell")
    from perfsuite import gate, kernel_probes, precheck, preflight

    pyproject = cfg.find_pyproject(config.rootpath)
    try:
        conf = cfg.load(pyproject, config.rootpath)
        device = _opt(config, "device", "cpu")
        override = _opt(config, "runner_class", None)
        try:
            rc, facts = runner_class.detect(device) if device in ("cpu", "cuda") else ("", {})
        except RuntimeError:
            if not override:  # no GPU to fingerprint: only an explicit class lets the cells run (and skip)
                raise
            rc, facts = "", {"device": device, "gpu": "none detected"}
        update = _flag(config, "update_baselines")
        from perfsuite.backends import inject

        inject.fraction_from_env()  # a malformed calibration knob is a usage error before anything runs
        precheck.check_thread_env(os.environ)  # so is a thread count the runtimes would silently ignore
        kernel_probes.injected()  # and a mistyped PERFSUITE_KERNEL_PROBES (else each affected cell fails with it)
        gate_config = gate.parse_config(conf.gate)  # a bad [tool.perfsuite.gate] is an error on every run
        settings = cfg.resolve(conf, profile=_opt(config, "profile", "smoke"), device=device,
                               backends=_opt(config, "backend", None), models=_opt(config, "model", None),
                               runner_class=override or rc, update_baselines=update,
                               workers=_opt(config, "workers", None))
    except (cfg.ConfigError, gate.PolicyError, RuntimeError, ValueError, preflight.PreflightError,
            kernel_probes.ProbeError) as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None
    facts["detected_runner_class"] = rc
    session = PerfSession(settings, facts, gate_config=gate_config,
                          fail_on_inconclusive=_flag(config, "fail_on_inconclusive"))
    config.stash[SESSION_KEY] = session
    if settings.update_baselines:
        _recording_preflight(session)
    if config.pluginmanager.hasplugin("benchmark"):
        _configure_benchmark_storage(config, session, explicit_storage=pyproject is None)


def _recording_preflight(session: PerfSession) -> None:
    """Before anything is measured: the baseline folder is writable and no other perfsuite run is using the
    machine (an exclusive suite lock, held until the session ends). The load check comes right before measuring."""
    from perfsuite import preflight

    old = baselines.legacy_folder(session.settings.config.baselines_dir, session.runner_class, session.facts)
    if old is not None or session.facts.get("cpu_flags_injected"):
        raise pytest.UsageError("perfsuite: not recording a baseline: " + (
            baselines.legacy_message(old, session.runner_class) if old is not None else
            f"{session.facts['cpu_flags_injected']} is set, a test hook that changes decisions, not kernels; unset it"))
    try:
        preflight.check_writable(session.baseline_dir)
        session.lock = preflight.SuiteLock(exclusive=True).acquire()
    except preflight.PreflightError as exc:
        raise pytest.UsageError(f"perfsuite: not recording a baseline: {exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    ps = config.stash.get(SESSION_KEY, None)
    if ps is not None and ps.lock is not None:
        ps.lock.release()
        ps.lock = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    ps = session.config.stash.get(SESSION_KEY, None)
    if ps is not None:
        _after_benchmark_configure(session.config, ps)


def _configure_benchmark_storage(config: pytest.Config, session: PerfSession, explicit_storage: bool) -> None:
    """Point pytest-benchmark at baselines/<runner-class>/ before its session is built (it is trylast)."""
    opt = config.option
    ours = not explicit_storage and opt.benchmark_storage in ("file://./.benchmarks", "./.benchmarks")
    if ours:
        opt.benchmark_storage = "file://" + str(session.settings.config.baselines_dir)
        if opt.benchmark_save or opt.benchmark_autosave:
            raise pytest.UsageError("perfsuite: record baselines with --perf-update-baselines (atomic, only after a "
                                    "passing run), not --benchmark-save/--benchmark-autosave")
    compare = opt.benchmark_compare
    if compare and ours:
        try:  # a corrupt or foreign file must be an error, not silently skipped by pytest-benchmark
            runs = baselines.read_runs(session.baseline_dir, session.runner_class)
            if isinstance(compare, str) and runs:  # NNNN: pytest-benchmark's table uses that run, so does the gate
                runs, note = baselines.compared_runs(runs, compare, session.runner_class)
                session.notes.append(note)
        except baselines.BaselineError as exc:
            raise pytest.UsageError(f"perfsuite: {exc}") from None
        old = baselines.legacy_folder(session.settings.config.baselines_dir, session.runner_class, session.facts)
        if not runs and old is not None:
            raise pytest.UsageError(f"perfsuite: no baseline for runner class {session.runner_class!r}: "
                                    + baselines.legacy_message(old, session.runner_class))
        if not runs:
            present = sorted(p.name for p in session.settings.config.baselines_dir.glob("*") if p.is_dir())
            raise pytest.UsageError(
                f"perfsuite: no baseline for runner class {session.runner_class!r} in {session.baseline_dir}; "
                f"record one with `pytest --perf-update-baselines` (classes present: "
                f"{', '.join(present) or 'none'})")
        _setup_gate(session, runs)
        from perfsuite.confirm import options

        session.confirm = options.start(config, session)
    # pytest-benchmark keys storage by platform; we key it by runner class. Its session reads the compare option
    # while it is constructed, so hold it back and load the comparison once the machine id is ours.
    config.stash[_COMPARE_KEY] = compare
    opt.benchmark_compare = []
    if session.settings.update_baselines and not opt.benchmark_json:
        fd, tmp = tempfile.mkstemp(prefix="perfsuite-run-", suffix=".json")
        os.close(fd)
        os.unlink(tmp)
        session.baseline_json = Path(tmp)
        opt.benchmark_json = Path(tmp)
    elif session.settings.update_baselines:
        session.baseline_json = Path(opt.benchmark_json)


_COMPARE_KEY = pytest.StashKey[Any]()


def _setup_gate(session: PerfSession, runs: list[dict[str, Any]]) -> None:
    from perfsuite import gate

    session.gate = gate.make_session(session.gate_config, runs)


def _after_benchmark_configure(config: pytest.Config, session: PerfSession) -> None:
    """After pytest-benchmark's configure: give its session our machine id, then load the comparison."""
    if _COMPARE_KEY in config.stash:
        pbcompat.load_comparison(config, session.runner_class, config.stash[_COMPARE_KEY])


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    machine_info["perfsuite"] = {"schema_version": baselines.SCHEMA_VERSION, "runner_class": session.runner_class,
                                 "profile": session.settings.profile.name, **session.facts}
    try:
        from perfsuite import doctor

        machine_info["perfsuite"]["doctor"] = doctor.machine_facts(session.settings.device)
    except Exception as exc:  # facts are context; a failing probe must not fail the run
        machine_info["perfsuite"]["doctor"] = {"error": f"{type(exc).__name__}: {exc}"}
    from perfsuite import kernel_probes_run  # which kernels this machine had: cached, probed when recording

    machine_info["perfsuite"]["kernels"] = kernel_probes_run.machine_info(probe=session.settings.update_baselines)
    if session.load is not None:
        machine_info["perfsuite"]["preflight"] = session.load
    if session.peaks:
        machine_info["perfsuite"]["roofline"] = session.peaks


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any],
                                          compared_benchmark: dict[str, Any]) -> None:
    mine = machine_info.get("perfsuite", {}).get("runner_class")
    recorded = compared_benchmark.get("machine_info", {})
    theirs = runner_class.recorded_class(recorded)  # today's name of a run recorded before classes had the tier
    if mine not in (theirs, recorded.get("perfsuite", {}).get("runner_class")):
        raise pytest.UsageError(
            f"perfsuite: refusing to compare with a baseline of runner class {theirs!r} on a {mine!r} machine; "
            "compare against baselines/<this class>/ or pass --perf-runner-class if the machines are equivalent")


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
    from perfsuite import harness

    plan = harness.plan_from_items(request.session.items)
    config = request.config
    once = pbcompat.session_disabled(config)
    cprofile = pbcompat.session_cprofile(config)
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    total_w = sum(1 if once else perf_session.settings.workers_for(c.backend) or 1 for c in plan.cells)

    def say(line: str) -> None:
        if tr is None:
            return
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(line)
        else:
            tr.write_line(line)

    def progress(n: int, total: int, cell_id: str, pr: Any) -> None:
        say(f"perfsuite: process {n}/{total} {cell_id} #{pr.index}: {harness.describe_process(pr)}")

    from perfsuite import precheck, preflight

    try:  # the workers materialise models there: a bad cache is one line now, not a traceback in a worker
        precheck.check_locations([(*precheck.cache_location(perf_session.settings.config.cache_dir), "folder")])
    except preflight.PreflightError as exc:
        pytest.exit(f"perfsuite: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    _check_machine(perf_session, say)
    say(f"\nperfsuite: measuring {len(plan.cells)} cell(s) in {total_w} worker process(es), random order"
        + (" (pytest-benchmark disabled: each workload runs once, nothing is timed)" if once else ""))
    shared = None
    if perf_session.lock is None:  # a recording run already holds it exclusively
        try:
            shared = preflight.SuiteLock(exclusive=False).acquire()
        except preflight.PreflightError as exc:
            pytest.exit(f"perfsuite: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    try:
        if plan.cells and not once:
            perf_session.peaks = harness.measure_peaks(perf_session, plan)
        results = harness.measure_plan(perf_session, plan, once=once, cprofile=cprofile, progress=progress)
        if perf_session.gate is not None:
            perf_session.gate.set_family(request.session.items, results)
        if perf_session.confirm is not None and not once:  # A/B-confirm what the stored baselines flag
            perf_session.confirm.run(perf_session, request.session.items, results, say, config.rootpath)
    finally:
        if shared is not None:  # held while measuring only: a later recording run in this session must get it
            shared.release()
    return results


def _check_machine(session: PerfSession, say: Any) -> None:
    """The load check right before measuring: a recording run refuses (or marks) a busy machine; other runs
    record the sample with their results."""
    from perfsuite import preflight

    policy = session.settings.config.preflight
    verdict = preflight.check_load(policy)
    session.load = {**verdict.sample.as_dict(), "ok": verdict.ok, "problems": list(verdict.problems)}
    if verdict.ok:
        return
    if session.settings.update_baselines and policy.on_busy == "refuse":
        pytest.exit(f"perfsuite: not recording a baseline: {verdict.message()}", returncode=pytest.ExitCode.USAGE_ERROR)
    session.load["contended"] = True
    say(f"perfsuite: warning: {verdict.message()}")


@pytest.fixture
def perf(perf_session: PerfSession, perf_measurements: dict[str, Any], perf_cell: Any) -> Any:
    from perfsuite.harness import PerfRun

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
    if session is None:
        return []
    s = session.settings
    return [f"perfsuite: profile={s.profile.name} device={s.device} runner-class={s.runner_class} "
            f"baselines={session.baseline_dir}"]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    ps = session.config.stash.get(SESSION_KEY, None)
    if ps is None or ps.baseline_json is None:
        return
    from perfsuite.recording import finish_recording

    if not finish_recording(ps, int(exitstatus), bool(session.testsfailed)):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    ps = config.stash.get(SESSION_KEY, None)
    if ps is None:
        return
    if ps.gate is not None and config.getoption("perf_gate_json"):
        import dataclasses

        Path(config.getoption("perf_gate_json")).write_text(json.dumps(
            [dataclasses.asdict(v) for v in ps.gate.verdicts], indent=1))
    if ps.gate is not None:
        lines = ps.gate.summary_table() + (ps.confirm.summary_lines() if ps.confirm is not None else [])
        if lines:
            terminalreporter.section("perfsuite regression gate")
            for line in lines:
                terminalreporter.write_line(line)
    for note in ps.notes:
        terminalreporter.write_line(note)
