"""What the plugin's hooks and fixtures do (perfsuite.plugin declares them and forwards here): build and run the
typed :class:`~perfsuite.orchestrate.session.PerfSession`. Imports nothing heavy at module level (the plugin imports
this module)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from perfsuite.adapters.pytest import options, pbcompat
from perfsuite.facts import config as cfg
from perfsuite.facts.errors import reraise_as
from perfsuite.machine import runner_class
from perfsuite.orchestrate import baselines
from perfsuite.orchestrate.session import PerfSession
from perfsuite.verdict.outcome import GateOutcome

SESSION_KEY = pytest.StashKey[PerfSession]()


class Refused(Exception):
    """A usage problem, worded without the ``perfsuite:`` prefix the plugin adds."""


# ----------------------------------------------------------------------------------------------- configure
def configure(config: pytest.Config) -> None:
    """Resolve the settings and the runner class, stash the session, point pytest-benchmark's storage at ours."""
    from perfsuite.machine import kernel_probes, precheck, preflight, signals
    from perfsuite.measure.backends import inject
    from perfsuite.verdict.policy import PolicyError, parse_config

    pyproject = cfg.find_pyproject(config.rootpath)
    with reraise_as(Refused, cfg.ConfigError, PolicyError, RuntimeError, ValueError, preflight.PreflightError,
                    kernel_probes.ProbeError):
        conf = cfg.load(pyproject, config.rootpath)
        device = options.opt(config, "device", "cpu")
        override = options.opt(config, "runner_class", None)
        try:
            rc, facts = runner_class.detect(device) if device in ("cpu", "cuda") else ("", {})
        except RuntimeError:
            if not override:  # no GPU to fingerprint: only an explicit class lets the cells run (and skip)
                raise
            rc, facts = "", {"device": device, "gpu": "none detected"}
        inject.fraction_from_env()  # a malformed calibration knob is a usage error before anything runs
        precheck.check_thread_env(os.environ)  # so is a thread count the runtimes would silently ignore
        kernel_probes.injected()  # and a mistyped PERFSUITE_KERNEL_PROBES (else each affected cell fails with it)
        gate_config = parse_config(conf.gate)  # a bad [tool.perfsuite.gate] is an error on every run
        settings = cfg.resolve(conf, profile=options.opt(config, "profile", "smoke"), device=device,
                               backends=options.opt(config, "backend", None), models=options.opt(config, "model", None),
                               runner_class=override or rc, update_baselines=options.flag(config, "update_baselines"),
                               workers=options.opt(config, "workers", None))
    facts["detected_runner_class"] = rc
    session = PerfSession(settings, facts, gate_config=gate_config,
                          fail_on_inconclusive=options.flag(config, "fail_on_inconclusive"))
    config.stash[SESSION_KEY] = session
    session.sigterm = signals.install()  # a cancelled CI job (SIGTERM) cleans up like Ctrl-C: workers, temp folders
    if settings.update_baselines:
        recording_preflight(session)
    if config.pluginmanager.hasplugin("benchmark"):
        configure_benchmark_storage(config, session, explicit_storage=pyproject is None)


def recording_preflight(session: PerfSession) -> None:
    """Before anything is measured: the baseline folder is writable and no other perfsuite run is using the
    machine (an exclusive suite lock, held until the session ends). The load check comes right before measuring."""
    from perfsuite.machine import preflight

    old = baselines.legacy_folder(session.settings.config.baselines_dir, session.runner_class, session.facts)
    if old is not None or session.facts.get("cpu_flags_injected"):
        raise Refused("not recording a baseline: " + (
            baselines.legacy_message(old, session.runner_class) if old is not None else
            f"{session.facts['cpu_flags_injected']} is set, a test hook that changes decisions, not kernels; unset it"))
    try:
        preflight.check_writable(session.baseline_dir)
        session.lock = preflight.SuiteLock(exclusive=True).acquire()
    except preflight.PreflightError as exc:
        raise Refused(f"not recording a baseline: {exc}") from None


_COMPARE_KEY = pytest.StashKey[Any]()


def configure_benchmark_storage(config: pytest.Config, session: PerfSession, explicit_storage: bool) -> None:
    """Point pytest-benchmark at baselines/<runner-class>/ before its session is built (it is trylast)."""
    opt = config.option
    ours = not explicit_storage and opt.benchmark_storage in ("file://./.benchmarks", "./.benchmarks")
    if ours:
        opt.benchmark_storage = "file://" + str(session.settings.config.baselines_dir)
        if opt.benchmark_save or opt.benchmark_autosave:
            raise Refused("record baselines with --perf-update-baselines (atomic, only after a "
                          "passing run), not --benchmark-save/--benchmark-autosave")
    compare = opt.benchmark_compare
    if compare and ours:
        # a corrupt or foreign file must be an error, not silently skipped by pytest-benchmark
        with reraise_as(Refused, baselines.BaselineError):
            runs = baselines.read_runs(session.baseline_dir, session.runner_class)
            if isinstance(compare, str) and runs:  # NNNN: pytest-benchmark's table uses that run, so does the gate
                runs, note = baselines.compared_runs(runs, compare, session.runner_class)
                session.notes.append(note)
        old = baselines.legacy_folder(session.settings.config.baselines_dir, session.runner_class, session.facts)
        if not runs and old is not None:
            raise Refused(f"no baseline for runner class {session.runner_class!r}: "
                          + baselines.legacy_message(old, session.runner_class))
        if not runs:
            present = ", ".join(sorted(p.name for p in session.settings.config.baselines_dir.glob("*") if p.is_dir()))
            raise Refused(f"no baseline for runner class {session.runner_class!r} in {session.baseline_dir}; record "
                          f"one with `pytest --perf-update-baselines` (classes present: {present or 'none'})")
        from perfsuite.verdict.screen import GateSession

        session.gate = GateSession(runs, session.gate_config)
        session.confirm = options.confirmation(config, session)
    # pytest-benchmark keys storage by platform; we key it by runner class. Its session reads the compare option
    # while it is constructed, so hold it back and load the comparison once the machine id is ours.
    config.stash[_COMPARE_KEY] = compare
    opt.benchmark_compare = []
    if session.settings.update_baselines and not opt.benchmark_json:
        fd, tmp = tempfile.mkstemp(prefix="perfsuite-run-", suffix=".json")
        os.close(fd)
        os.unlink(tmp)
        session.baseline_json = opt.benchmark_json = Path(tmp)
    elif session.settings.update_baselines:
        session.baseline_json = Path(opt.benchmark_json)


def after_benchmark_configure(config: pytest.Config, session: PerfSession) -> None:
    """After pytest-benchmark's configure: give its session our machine id, then load the comparison."""
    if _COMPARE_KEY in config.stash:
        pbcompat.load_comparison(config, session.runner_class, config.stash[_COMPARE_KEY])


def unconfigure(session: PerfSession) -> None:
    from perfsuite.machine import signals

    if session.lock is not None:
        session.lock.release()
        session.lock = None
    signals.restore(session.sigterm)
    session.sigterm = None


# -------------------------------------------------------------------------------------------- machine info
def machine_info(session: PerfSession) -> dict[str, Any]:
    """``machine_info["perfsuite"]`` of a pytest-benchmark run."""
    from perfsuite.machine import kernel_probes_run  # which kernels this machine had: cached, probed when recording

    info: dict[str, Any] = {"schema_version": baselines.SCHEMA_VERSION, "runner_class": session.runner_class,
                            "profile": session.settings.profile.name, **session.facts}
    try:
        from perfsuite.machine import doctor

        info["doctor"] = doctor.machine_facts(session.settings.device)
    except Exception as exc:  # facts are context; a failing probe must not fail the run
        info["doctor"] = {"error": f"{type(exc).__name__}: {exc}"}
    info["kernels"] = kernel_probes_run.machine_info(probe=session.settings.update_baselines)
    if session.load is not None:
        info["preflight"] = session.load
    if session.peaks:
        info["roofline"] = session.peaks
    return info


def incomparable(machine_info: dict[str, Any], compared_benchmark: dict[str, Any]) -> str | None:
    """Why a stored run may not be compared with this machine's (another runner class; without the ``perfsuite:``
    prefix), or None."""
    mine = machine_info.get("perfsuite", {}).get("runner_class")
    recorded = compared_benchmark.get("machine_info", {})
    theirs = runner_class.recorded_class(recorded)  # today's name of a run recorded before classes had the tier
    if mine in (theirs, recorded.get("perfsuite", {}).get("runner_class")):
        return None
    return (f"refusing to compare with a baseline of runner class {theirs!r} on a {mine!r} machine; "
            "compare against baselines/<this class>/ or pass --perf-runner-class if the machines are equivalent")


def report_header(session: PerfSession) -> list[str]:
    s = session.settings
    note = session.confirm.machine_note if session.confirm is not None else None
    return [f"perfsuite: profile={s.profile.name} device={s.device} runner-class={s.runner_class} "
            f"baselines={session.baseline_dir}"] + ([f"perfsuite: {note}"] if note else [])


# --------------------------------------------------------------------------------------------- measuring
def measure(request: pytest.FixtureRequest, session: PerfSession) -> dict[str, Any]:
    from perfsuite.machine import precheck, preflight
    from perfsuite.orchestrate import plan as planning

    plan = planning.plan_from_items(request.session.items)
    config = request.config
    once = pbcompat.session_disabled(config)
    cprofile = pbcompat.session_cprofile(config)
    say = _sayer(config)
    total_w = sum(1 if once else session.settings.workers_for(c.backend) or 1 for c in plan.cells)

    def progress(n: int, total: int, cell_id: str, pr: Any) -> None:
        say(f"perfsuite: process {n}/{total} {cell_id} #{pr.index}: {planning.describe_process(pr)}")

    # the workers materialise models there: a bad cache is one line now, not a traceback in a worker
    with reraise_as(Refused, preflight.PreflightError):
        precheck.check_locations([(*precheck.cache_location(session.settings.config.cache_dir), "folder")])
        # one run measures at a time (a recording run already holds the lock): wait for another, then check the load
        shared = (preflight.SuiteLock(exclusive=False, measuring=not once).acquire(
            wait_s=preflight.lock_wait_s(), say=say) if session.lock is None else None)
    try:
        with reraise_as(Refused, preflight.PreflightError):
            check_machine(session, say)
        say(f"\nperfsuite: measuring {len(plan.cells)} cell(s) in {total_w} worker process(es), random order"
            + (" (pytest-benchmark disabled: each workload runs once, nothing is timed)" if once else ""))
        if plan.cells and not once:
            session.peaks = planning.measure_peaks(session, plan) if session.settings.config.roofline else None
        results = planning.measure_plan(session, plan, once=once, cprofile=cprofile, progress=progress)
        if session.gate is not None:
            session.gate.set_family(request.session.items, results)
        if session.confirm is not None and not once:  # A/B-confirm what the stored baselines flag
            session.confirm.run(session, request.session.items, results, say, config.rootpath)
    finally:
        if shared is not None:  # held while measuring only: a later recording run in this session must get it
            shared.release()
    return results


def _sayer(config: pytest.Config) -> Callable[[str], None]:
    """A line on the terminal, shown even while pytest captures output."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        if tr is not None:
            with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
                tr.write_line(line)

    return say


def check_machine(session: PerfSession, say: Callable[[str], None]) -> None:
    """The load check right before measuring: a recording run refuses (or marks) a busy machine; other runs
    record the sample with their results."""
    from perfsuite.machine import preflight

    policy = session.settings.config.preflight
    verdict = preflight.check_load(policy)
    session.load = {**verdict.sample.as_dict(), "ok": verdict.ok, "problems": list(verdict.problems)}
    if verdict.ok:
        return
    if session.settings.update_baselines and policy.on_busy == "refuse":
        raise Refused(f"not recording a baseline: {verdict.message()}")
    session.load["contended"] = True
    say(f"perfsuite: warning: {verdict.message()}")


def enforce(outcome: GateOutcome) -> None:
    """Raise an outcome in the calling test: skip it, or warn (the warning names the caller's line) and then fail
    it when it failed (a failing test keeps its warnings: a drift on one metric beside a confirmed regression)."""
    if outcome.skip:
        pytest.skip(outcome.skip)
    for w in outcome.warnings:
        warnings.warn(w, stacklevel=2)
    if outcome.failure:
        pytest.fail(outcome.failure, pytrace=False)


# ------------------------------------------------------------------------------------------- session end
def terminal_summary(terminalreporter: Any, config: pytest.Config, session: PerfSession) -> None:
    """The gate's table (and the confirmation's lines), the ``--perf-gate-json`` file, the session's notes."""
    if session.gate is not None and config.getoption("perf_gate_json"):
        from perfsuite.verdict.decide import verdicts_json

        Path(config.getoption("perf_gate_json")).write_text(verdicts_json(session.gate.verdicts))
    if session.gate is not None:
        conf = session.confirm
        lines = (session.gate.summary_table(conf.decisions(session.gate.verdicts) if conf is not None else None)
                 + (conf.summary_lines() if conf is not None else []))
        if lines:
            terminalreporter.section("perfsuite regression gate")
            for line in lines:
                terminalreporter.write_line(line)
    for note in session.notes:
        terminalreporter.write_line(note)
