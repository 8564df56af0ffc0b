"""The plugin end to end, in subprocesses (pytester) on a small tiny-llama scenario."""

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """
[tool.perfsuite]
baselines_dir = "baselines"
roofline = {roofline}
[tool.perfsuite.backend_options.vllm]
kv_cache_space_gib = 1
[tool.perfsuite.scenarios]
tiny = {{ batch_size = 2, prompt_tokens = 16, new_tokens = {n} }}
[tool.perfsuite.profiles.smoke]
backends = ["{backend}"]
models = ["tiny-llama"]
scenarios = ["tiny"]
warmup_generations = 1
generations = {g}
worker_processes = {w}
"""

BUSY_OK = """[tool.perfsuite.preflight]
max_other_cores = 1024
max_steal_cores = 1024
"""

CELL = "{backend}-tiny-llama-float32-b2-p16-n{n}"


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.delenv("PERFSUITE_RUNNER_CLASS", raising=False)  # a caller's override would rename the folder
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the subprocesses import this checkout's perfsuite

    def make(n=4, g=3, backend="torch", w=2, roofline=False, busy_ok=False):  # roofline peaks (~8 s) where tested
        text = PYPROJECT.format(n=n, g=g, backend=backend, w=w, roofline=str(roofline).lower())
        if busy_ok:  # a recording beside other tests: no busy-machine refusal, and its own suite lock (own TMPDIR)
            text += BUSY_OK
            (pytester.path / "tmp").mkdir()
            monkeypatch.setenv("TMPDIR", str(pytester.path / "tmp"))
        pytester.makefile(".toml", pyproject=text)
        (pytester.path / "tests" / "perf").mkdir(parents=True)
        shutil.copy(ROOT / "tests" / "perf" / "test_latency.py", pytester.path / "tests" / "perf")
        return pytester

    return make


def run(pytester, *args):
    return pytester.runpytest_subprocess("tests/perf", "-p", "no:cacheprovider", "-q", *args)


def test_help_lists_perf_options(pytester):
    out = pytester.runpytest_subprocess("--help").stdout.str()
    for flag in ("--perf-backend", "--perf-model", "--perf-profile", "--perf-device", "--perf-runner-class",
                 "--perf-update-baselines", "--perf-workers", "--perf-fail-on-inconclusive"):
        assert flag in out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "onnxruntime-cpu", "vllm"])
def test_perf_run_is_per_token_and_self_consistent(project, backend):
    n, g, w = 8, 4, 2
    p = project(n=n, g=g, backend=backend, w=w, roofline=True)
    res = run(p, "--benchmark-json=out.json")
    res.assert_outcomes(passed=3)
    data = json.loads((p.path / "out.json").read_text())
    by = {b["name"].split("[")[0]: b for b in data["benchmarks"]}
    cell = CELL.format(n=n, backend=backend)
    assert set(by) == {"test_ttft", "test_tpot", "test_e2el"}
    assert all(b["param"] == cell for b in by.values())
    assert data["machine_info"]["perfsuite"]["schema_version"] == 1
    ttft, tpot, e2e = by["test_ttft"], by["test_tpot"], by["test_e2el"]
    # the run-start peaks (roofline = true here) give every cell its roofline
    assert data["machine_info"]["perfsuite"]["roofline"]["copy_bandwidth_bytes_per_s"] > 0
    assert tpot["extra_info"]["roofline_bound"] in ("cache-resident", "dram", "llc-unknown")
    # pytest-benchmark's own stats are per token: a TPOT round is one decode step, from every worker process.
    assert ttft["stats"]["rounds"] == w * g and e2e["stats"]["rounds"] == w * g
    assert tpot["stats"]["rounds"] == w * g * (n - 1)
    assert tpot["extra_info"]["generated_tokens"] == w * 2 * g * (n - 1)
    assert e2e["extra_info"]["generated_tokens"] == w * 2 * g * n
    ei = e2e["extra_info"]
    for key in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "output_throughput_tokens_per_s",
                "peak_rss_bytes"):
        assert key in ei
    # Each value was timed in a fresh worker process (not this pytest process), one entry per process.
    procs = ei["processes"]
    assert len(procs) == w and len({pr["pid"] for pr in procs}) == w
    assert ei["measured_by"]["worker_processes"] == w and ei["tokens_agree"]
    assert ei["measured_by"]["mode"] == ("spawn" if backend == "vllm" else "fork")
    # Inside an E2EL round, e2el = ttft + sum(itl) up to the timer calls between them (per process).
    for pr in procs:
        s_ = pr["samples"]
        for k in range(g):
            parts = s_["ttft_ms"][k] + sum(s_["itl_ms"][k * (n - 1):(k + 1) * (n - 1)])
            assert parts == pytest.approx(s_["e2el_ms"][k], rel=0.02)
    # Each test's pytest-benchmark stats are its processes' samples (seconds against milliseconds).
    for test, key in ((ttft, "ttft_ms"), (tpot, "itl_ms"), (e2e, "e2el_ms")):
        values = [v for pr in test["extra_info"]["processes"] for v in pr["samples"][key]]
        assert len(values) == test["stats"]["rounds"]
        assert test["stats"]["mean"] * 1e3 == pytest.approx(statistics.fmean(values), rel=1e-6)
    # Across the three tests, which are metrics of the same rounds: means add up where medians do not (in the CI run
    # of stop 43 a busy neighbour put 140 ms steps into some rounds; the median e2el, 163 ms, was 6x the sum of the
    # medians, 26 ms). A TPOT round is the decode call alone, inside its token-to-token interval, so mean e2el >=
    # mean ttft + (n - 1) * mean tpot; the gap is the bookkeeping between calls (0.2 % quiet), 3x would take
    # preemptions there longer than all the decode calls. This catches a unit slip (x1000) and per-generation vs
    # per-token timing (x7 at n = 8); an n vs n-1 slip is caught exactly by the round and token counts above.
    parts = ttft["stats"]["mean"] + (n - 1) * tpot["stats"]["mean"]
    assert parts * (1 - 1e-9) <= e2e["stats"]["mean"] < 3 * parts
    if backend == "vllm":
        # Our per-request TPOT against vLLM's own (last_token_ts - first_token_ts) / (n - 1), same generation:
        # both time the same engine steps, measured agreement 0.1 %; 2 % allows a busy CI neighbour.
        bi = ei["backend_info"]
        for ours, theirs in zip(bi["last_request_timings"], bi["last_vllm_request_stats"], strict=True):
            assert ours["tpot_s"] == pytest.approx(theirs["tpot_s"], rel=0.02)
        assert bi["engine_start_s"] > 0


@pytest.mark.slow  # a measuring run end to end (~7 s on 2 cores); pbcompat's disabled session is in the fast tier
def test_benchmark_disabled_runs_the_workload_once_and_says_nothing_was_timed(project):
    """--benchmark-disable (and xdist, which disables pytest-benchmark) used to break every perf test."""
    p = project(n=3, g=2)
    res = run(p, "--benchmark-disable", "--benchmark-json=out.json")
    res.assert_outcomes(passed=3)
    out = res.stdout.str()
    assert "pytest-benchmark disabled" in out and "nothing was timed" in out
    assert "process 1/1" in out  # one worker, once


@pytest.mark.slow  # a measuring run end to end (~14 s on 2 cores); the profile's path (test_worker_folders) is fast
def test_benchmark_cprofile_profiles_inside_the_worker(project, monkeypatch, tmp_path):
    """The profiles reach pytest-benchmark's JSON, and the worker folder that held them is gone afterwards."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    p = project(n=3, g=2, w=1)  # only a cell's first worker profiles: one is enough
    res = run(p, "--benchmark-cprofile=tottime", "--benchmark-json=out.json")
    res.assert_outcomes(passed=3)
    data = json.loads((p.path / "out.json").read_text())
    e2e = next(b for b in data["benchmarks"] if b["name"].startswith("test_e2el"))
    assert any("decode" in row["function_name"] for row in e2e["cprofile"])
    assert not list(tmp.glob("perfsuite-workers-*")), sorted(tmp.iterdir())


@pytest.mark.slow  # a measuring run interrupted (~7 s each on 2 cores); perfsuite.machine.signals is unit-tested
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_sigint_during_measurement_writes_nothing_and_leaves_no_worker(project, how, tmp_path):
    """SIGINT while workers measure: pytest reports the interrupt, nothing is recorded, no process is left
    (pytest-benchmark's save used to crash with `min() arg is an empty sequence`). SIGTERM to pytest alone (a
    cancelled CI job, ``timeout``) takes the same path: no worker and no worker folder outlives it."""
    p = project(n=16, g=30, w=6)
    with (p.path / "pyproject.toml").open("a") as fh:  # the interrupt is under test, not the load check: a busy
        fh.write('\n[tool.perfsuite.preflight]\non_busy = "mark"\n')  # machine records (marked) until interrupted
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "tests/perf", "-p", "no:cacheprovider", "-q",
                             "--perf-update-baselines"], cwd=p.path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    seen = ""
    deadline = time.monotonic() + 300
    assert proc.stdout is not None
    while "measuring" not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:  # the run ended before measuring (e.g. refused): fail now, not after the deadline
            break
        seen += line
    if "measuring" not in seen:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        pytest.fail(f"the run never started measuring:\n{seen}", pytrace=False)
    time.sleep(1.0)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    out = seen + proc.stdout.read()
    proc.wait(timeout=120)
    proc.stdout.close()
    assert proc.returncode == 2, out  # pytest's "interrupted"
    assert ("KeyboardInterrupt" in out or "Terminated: signal 15 (SIGTERM)" in out), out
    assert "min() arg is an empty sequence" not in out
    assert not (p.path / "baselines").exists() or not any((p.path / "baselines").rglob("*.json"))
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"perfsuite.measure.worker.*{p.path}|{p.path}.*perfsuite.measure.worker"],
                          capture_output=True, text=True).stdout.split()
    assert not left
    assert not list(tmp.glob("perfsuite-workers-*")), "a worker folder outlived the interrupted run"


@pytest.mark.slow
def test_baseline_record_compare_and_refusals(project):
    p = project(n=3, g=2, busy_ok=True)  # runs beside other tests: no busy-machine refusal (tested elsewhere)
    res = run(p, "--perf-update-baselines")
    res.assert_outcomes(passed=3)
    (rc_dir,) = (p.path / "baselines").iterdir()
    (first,) = rc_dir.iterdir()
    assert first.name.startswith("0001_smoke") and "recorded baseline" in res.stdout.str()
    assert json.loads(first.read_text())["benchmarks"][0]["stats"]["data"]  # raw rounds kept

    # Compare finds this class's baseline with no extra flag.
    res = run(p, "--benchmark-compare")
    res.assert_outcomes(passed=3)
    assert f"Comparing against benchmarks from: {rc_dir.name}/{first.name}" in res.stdout.str() + res.stderr.str()

    # The gate against one baseline run: nothing can fail yet, but the table says what it sees.
    assert "perfsuite regression gate" in res.stdout.str()

    # A failing run with --perf-update-baselines writes nothing.
    (p.path / "tests" / "perf" / "test_zfail.py").write_text("def test_fails():\n    assert False\n")
    res = run(p, "--perf-update-baselines")
    res.assert_outcomes(passed=3, failed=1)
    assert [f.name for f in rc_dir.iterdir()] == [first.name]
    assert "no baseline written" in res.stdout.str()
    (p.path / "tests" / "perf" / "test_zfail.py").unlink()

    # Another runner class has no baseline here: a clear refusal, not a silent "nothing to compare".
    res = run(p, "--benchmark-compare", "--perf-runner-class", "rocm-gfx942-mi300x")
    assert res.ret == 4
    assert "no baseline for runner class 'rocm-gfx942-mi300x'" in res.stderr.str()

    # A baseline of another class named explicitly is refused by the compare hook.
    foreign = json.loads(first.read_text())
    foreign["machine_info"]["perfsuite"]["runner_class"] = "rocm-gfx90a-mi250x"
    other = p.path / "foreign.json"
    other.write_text(json.dumps(foreign))
    res = run(p, f"--benchmark-compare={other}", "--benchmark-storage=file://elsewhere")
    assert res.ret != 0
    assert "refusing to compare with a baseline of runner class 'rocm-gfx90a-mi250x'" in (
        res.stdout.str() + res.stderr.str())

    # A corrupt baseline is a one-line error naming the file and the fix; the file is left as it was.
    first.write_text('{"benchmarks": [')
    res = run(p, "--benchmark-compare")
    assert res.ret == 4
    err = res.stderr.str()
    assert "corrupt baseline" in err and first.name in err and "Traceback" not in err
    assert first.read_text() == '{"benchmarks": ['


def test_bad_options_and_config_are_usage_errors(project):
    p = project()
    res = run(p, "--perf-profile", "weekly")
    assert res.ret == 4 and "unknown profile; use one of smoke, pr, nightly" in res.stderr.str()
    (p.path / "pyproject.toml").write_text("[tool.perfsuite]\nbaseline_dir = 'x'\n")
    res = run(p)
    assert res.ret == 4 and "baseline_dir: unknown key" in res.stderr.str()
    assert "Traceback" not in res.stderr.str()


def test_recording_refuses_before_measuring(project):
    """Read-only baselines, another run of the suite holding the machine, or a malformed calibration knob: one
    usage error before anything is measured, nothing written."""
    from perfsuite.machine import preflight

    p = project(n=3, g=2)
    pyproject = p.path / "pyproject.toml"
    text = pyproject.read_text()
    # /proc refuses new files even to root (chmod does not stop root)
    pyproject.write_text(text.replace('baselines_dir = "baselines"', 'baselines_dir = "/proc/perfsuite-baselines"'))
    res = run(p, "--perf-update-baselines")
    assert res.ret == 4 and "not recording a baseline" in res.stderr.str() and "measuring" not in res.stdout.str()
    pyproject.write_text(text)
    with preflight.SuiteLock(exclusive=False):  # another perfsuite run measuring on this machine
        res = run(p, "--perf-update-baselines")
    assert res.ret == 4 and "another perfsuite run is using this machine" in res.stderr.str()
    assert not (p.path / "baselines").exists() or not any((p.path / "baselines").rglob("*.json"))
    # an ordinary run waits for one that is measuring (PERFSUITE_LOCK_WAIT_S), then gives up in one line
    os.environ["PERFSUITE_LOCK_WAIT_S"] = "1"
    try:
        with preflight.SuiteLock(exclusive=False, measuring=True):
            res = run(p)
    finally:
        del os.environ["PERFSUITE_LOCK_WAIT_S"]
    text = res.stdout.str() + res.stderr.str()
    assert res.ret == 4 and "waiting up to 1 s for another perfsuite run on this machine" in text, text[-3000:]
    assert "still measuring on this machine after 1 s of waiting" in text and "measuring 1 cell" not in text
    assert "Traceback" not in text
    os.environ["PERFSUITE_INJECT_DECODE_SLOWDOWN"] = "abc"
    try:
        res = run(p)
    finally:
        del os.environ["PERFSUITE_INJECT_DECODE_SLOWDOWN"]
    assert res.ret == 4 and "PERFSUITE_INJECT_DECODE_SLOWDOWN='abc' is not a number" in res.stderr.str()
    assert "Traceback" not in res.stderr.str()


@pytest.mark.slow
def test_unavailable_backend_skips_with_reason(project):
    p = project()
    # No GPU here: without an explicit runner class there is nothing to fingerprint (a usage error) ...
    res = run(p, "--perf-device", "cuda")
    assert res.ret == 4 and "sees no GPU" in res.stderr.str()
    # ... with one, every cell is skipped with the backend's own reason.
    res = run(p, "--perf-device", "cuda", "--perf-runner-class", "cuda-test", "-rs")
    res.assert_outcomes(skipped=3)
    assert "sees no GPU: torch.cuda.is_available() is False" in res.stdout.str()


@pytest.mark.slow
@pytest.mark.alone  # records baselines: refused beside another test's processes
def test_gate_fails_a_real_slowdown_and_warns_when_it_cannot_decide(project):
    """Record 6 baselines, then a run whose decode steps are 11x slower (real extra work in the worker): test_tpot
    and test_e2el fail, test_ttft's outcome is not pinned. An undecidable run warns with the MDE and the ab command,
    and --perf-fail-on-inconclusive turns that into a failure.

    Why 6 baseline runs: the gate predicts one new run from the spread of the stored runs (t with R-1 df, at the
    Bonferroni level 0.01/3). With 4 runs that straddled one of this VM's slow states (log SD 0.33) the 11x run read
    +755 %, p = 0.0051, inconclusive (CI 2026-12-05). With R = 6 the largest log SD at which 11x is still called is
    0.50 (0.32 at R = 4); with 5x injected, e2el's +162 % stayed inside the MDE of 4 baselines (CI 2026-12-01)."""
    p = project(n=4, g=2, w=3)
    # This test is about the gate's verdict, not about baseline acceptance (tests/unit/test_recording_acceptance.py):
    # acceptance compares a 4th recording with the 3 stored ones and, on this drifting VM, refused the 4th in each of
    # 4 series of 4 (CI 2026-12-02, AVX2 EPYC in its slow state). So every run is recorded beside an empty folder
    # (acceptance needs 3 stored runs) and then put in place under its number.
    base = p.path / "baselines"
    stored = lambda: sorted(base.rglob("0*.json"))  # noqa: E731
    aside = p.path / "aside"
    for k in range(1, 7):
        (cls,) = [d for d in base.iterdir() if d.is_dir()] if base.is_dir() else [None]
        if cls is not None:
            cls.rename(aside)
        run(p, "--perf-update-baselines").assert_outcomes(passed=3)
        (cls,) = [d for d in base.iterdir() if d.is_dir()]
        (new,) = cls.glob("0*.json")
        if k > 1:
            new.rename(aside / (f"{k:04d}" + new.name[4:]))
            cls.rmdir()
            aside.rename(cls)
    assert [f.name[:4] for f in stored()] == [f"{k:04d}" for k in range(1, 7)], stored()
    res = p.runpytest_subprocess("tests/perf", "-p", "no:cacheprovider", "-q", "--benchmark-compare",
                                 "-W", "default::perfsuite.verdict.outcome.GateInconclusive")
    out = res.stdout.str()
    assert "perfsuite regression gate" in out
    os.environ["PERFSUITE_INJECT_DECODE_SLOWDOWN"] = "10"
    try:
        res = run(p, "--benchmark-compare")
    finally:
        del os.environ["PERFSUITE_INJECT_DECODE_SLOWDOWN"]
    out = res.stdout.str()
    assert "median_tpot_ms: regression" in out, out
    # test_tpot and test_e2el fail on the slowed decode. test_ttft's outcome is not pinned: its prefill rounds come
    # from the same generation loop as the slowed decode steps, and on 2026-12-04 (clean clone, fast EPYC) it read
    # +36 % [+0.8, +84] against the 4 baselines once, a failure the 10x decode injection does not explain.
    fails = [ln for ln in res.stdout.lines if ln.startswith("FAILED")]
    assert any("test_tpot" in ln for ln in fails) and any("test_e2el" in ln for ln in fails), out
    assert res.parseoutcomes().get("failed") in (2, 3), out
    # One baseline run is not enough to fail on: inconclusive, visible, and a failure only when asked. The slowed run
    # keeps that verdict inconclusive whatever the VM does meanwhile (unslowed, CI 2026-12-02 read "improvement"
    # -40..-50 % when the VM left its slow state between the recording and this run).
    for f in sorted((p.path / "baselines").rglob("0*.json"))[1:]:
        f.unlink()
    os.environ["PERFSUITE_INJECT_DECODE_SLOWDOWN"] = "10"
    try:
        res = p.runpytest_subprocess("tests/perf", "-p", "no:cacheprovider", "-q", "--benchmark-compare",
                                     "-W", "default::perfsuite.verdict.outcome.GateInconclusive")
        out = res.stdout.str()
        assert res.ret == 0 and "GateInconclusive" in out and "record more baseline runs" in out, out
        res = run(p, "--benchmark-compare", "--perf-fail-on-inconclusive")
    finally:
        del os.environ["PERFSUITE_INJECT_DECODE_SLOWDOWN"]
    assert res.ret == 1 and "--perf-fail-on-inconclusive" in res.stdout.str()
