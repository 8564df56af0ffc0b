"""pytest plugin (entry point ``pytest11: perfsuite``). Imports nothing heavy: backends load inside fixtures.

Path from an option to a verdict: ``pytest_addoption`` -> ``pytest_configure`` resolves :class:`Settings`
(config.py) and the runner class, points pytest-benchmark's storage at ``baselines/<runner-class>/`` ->
``pytest_generate_tests`` parametrizes ``perf_cell`` with the profile's cells -> the ``perf`` fixture builds
the backend -> harness.PerfRun measures and gates -> ``pytest_sessionfinish`` records a baseline, atomically,
only when asked and only if the whole run passed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfsuite import baselines, runner_class
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
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfsuite", "perfsuite: LLM inference latency benchmarks")
    for flag, key, help_ in _OPTIONS:
        group.addoption(flag, dest=f"perf_{key}", default=None, help=f"{help_}. Env PERFSUITE_{key.upper()}, "
                        f"ini perfsuite_{key}.")
        parser.addini(f"perfsuite_{key}", help_, default=None)
    group.addoption("--perf-update-baselines", dest="perf_update_baselines", action="store_true", default=None,
                    help="record this run as a new baseline in baselines/<runner-class>/ (atomic; written only if "
                         "every test passed). Env PERFSUITE_UPDATE_BASELINES=1, ini perfsuite_update_baselines.")
    parser.addini("perfsuite_update_baselines", "record a new baseline", type="bool", default=False)


def _opt(config: pytest.Config, key: str, default: Any) -> Any:
    return cfg.pick(config.getoption(f"perf_{key}"), f"PERFSUITE_{key.upper()}", config.getini(f"perfsuite_{key}"),
                    default)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before pytest-benchmark builds its session (its configure is trylast)."""
    config.addinivalue_line("markers", "perf: a perfsuite latency benchmark of one cell")
    from perfsuite import gate

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
        update = bool(config.getoption("perf_update_baselines") or os.environ.get("PERFSUITE_UPDATE_BASELINES") == "1"
                      or config.getini("perfsuite_update_baselines"))
        gate_config = gate.parse_config(conf.gate)  # a bad [tool.perfsuite.gate] is an error on every run
        settings = cfg.resolve(conf, profile=_opt(config, "profile", "smoke"), device=device,
                               backends=_opt(config, "backend", None), models=_opt(config, "model", None),
                               runner_class=override or rc, update_baselines=update)
    except (cfg.ConfigError, gate.PolicyError, RuntimeError) as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None
    facts["detected_runner_class"] = rc
    session = PerfSession(settings, facts, gate_config=gate_config)
    config.stash[SESSION_KEY] = session
    if config.pluginmanager.hasplugin("benchmark"):
        _configure_benchmark_storage(config, session, explicit_storage=pyproject is None)


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
        except baselines.BaselineError as exc:
            raise pytest.UsageError(f"perfsuite: {exc}") from None
        if not runs:
            present = sorted(p.name for p in session.settings.config.baselines_dir.glob("*") if p.is_dir())
            raise pytest.UsageError(
                f"perfsuite: no baseline for runner class {session.runner_class!r} in {session.baseline_dir}; "
                f"record one with `pytest --perf-update-baselines` (classes present: "
                f"{', '.join(present) or 'none'})")
        _setup_gate(session, runs)
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
    bs = getattr(config, "_benchmarksession", None)
    if bs is None or _COMPARE_KEY not in config.stash:
        return
    bs.machine_id = session.runner_class
    bs.storage.default_machine_id = session.runner_class
    compare = config.stash[_COMPARE_KEY]
    config.option.benchmark_compare = compare
    bs.compare = compare
    bs.handle_loading()


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    machine_info["perfsuite"] = {"schema_version": baselines.SCHEMA_VERSION, "runner_class": session.runner_class,
                                 "profile": session.settings.profile.name, **session.facts}


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any],
                                          compared_benchmark: dict[str, Any]) -> None:
    mine = machine_info.get("perfsuite", {}).get("runner_class")
    theirs = compared_benchmark.get("machine_info", {}).get("perfsuite", {}).get("runner_class")
    if mine != theirs:
        raise pytest.UsageError(
            f"perfsuite: refusing to compare with a baseline of runner class {theirs!r} on a {mine!r} machine; "
            "compare against baselines/<this class>/ or pass --perf-runner-class if the machines are equivalent")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perf_cell" in metafunc.fixturenames:
        session = metafunc.config.stash[SESSION_KEY]
        cells = session.settings.cells()
        # module scope groups the tests of one cell together: one backend (engine) alive at a time.
        metafunc.parametrize("perf_cell", cells, ids=[c.id for c in cells], scope="module")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and session.gate is not None:
        session.gate.family_size = sum(1 for i in items if "perf_cell" in getattr(i, "fixturenames", ()))


@pytest.fixture(scope="session")
def perf_session(pytestconfig: pytest.Config) -> PerfSession:
    return pytestconfig.stash[SESSION_KEY]


@pytest.fixture(scope="module")
def perf_backend(perf_session: PerfSession, perf_cell: Any) -> Iterator[Any]:
    """The loaded backend of one cell; closed before the next cell's backend is built."""
    import dataclasses

    from perfsuite import models
    from perfsuite.backends import create

    backend = create(perf_cell)
    reason = backend.availability()
    if reason:
        pytest.skip(f"{perf_cell.backend}: {reason}")
    try:
        resolved = models.resolve(perf_cell.model, perf_session.settings.config.cache_dir)
    except models.ModelError as exc:
        pytest.fail(f"perfsuite: {exc}", pytrace=False)
    backend.cell = dataclasses.replace(perf_cell, model_dir=resolved.path)  # type: ignore[attr-defined]
    backend.load()
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
def perf(perf_session: PerfSession, perf_backend: Any) -> Any:
    from perfsuite import models
    from perfsuite.harness import PerfRun

    cell = perf_backend.cell
    vocab = models.resolve(cell.model, perf_session.settings.config.cache_dir, materialize=False).vocab_size
    sc = cell.scenario
    return PerfRun(perf_session, cell, perf_backend, models.prompts(sc.batch_size, sc.prompt_tokens, vocab, cell.seed))


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
    tmp = ps.baseline_json
    try:
        if exitstatus != 0 or session.testsfailed:
            ps.notes.append(f"perfsuite: run did not pass (exit status {int(exitstatus)}); no baseline written")
            return
        if not tmp.is_file():
            ps.notes.append("perfsuite: no benchmark ran; no baseline written")
            return
        data = json.loads(tmp.read_text())
        if not data.get("benchmarks"):
            ps.notes.append("perfsuite: no benchmark ran; no baseline written")
            return
        from pytest_benchmark.utils import get_tag

        path = baselines.write_run(ps.baseline_dir, data, f"{ps.settings.profile.name}_{get_tag()}")
        ps.notes.append(f"perfsuite: recorded baseline {path}")
    finally:
        if tmp.is_file() and tmp.name.startswith("perfsuite-run-"):
            tmp.unlink()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    ps = config.stash.get(SESSION_KEY, None)
    if ps is None:
        return
    if ps.gate is not None:
        lines = ps.gate.summary_table()
        if lines:
            terminalreporter.section("perfsuite regression gate")
            for line in lines:
                terminalreporter.write_line(line)
    for note in ps.notes:
        terminalreporter.write_line(note)
