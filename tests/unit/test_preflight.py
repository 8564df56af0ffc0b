"""Pre-flight checks for recording baselines, with real folders, real locks held by other processes and real load."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from perfsuite.machine import preflight as pf

ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux /proc")


# ---- writable -----------------------------------------------------------------------------------------------------
def test_writable_folder_passes_and_leaves_nothing(tmp_path):
    assert pf.check_writable(tmp_path / "baselines" / "cpu-x-2c") == tmp_path  # nearest existing folder tried
    assert list(tmp_path.iterdir()) == []


def test_folder_root_cannot_write_is_refused():
    # /sys refuses new files even to root: a real unwritable folder on any Linux machine.
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("no /sys")
    with pytest.raises(pf.PreflightError) as exc:
        pf.check_writable(Path("/sys/kernel/perfsuite-baselines/cpu-x-2c"))
    msg = str(exc.value)
    assert "cannot record baselines: /sys/kernel is not writable" in msg and "nothing was measured" in msg


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores permission bits (the /sys test covers root)")
def test_read_only_folder_is_refused(tmp_path):
    (tmp_path / "baselines").mkdir()
    os.chmod(tmp_path / "baselines", 0o555)
    try:
        with pytest.raises(pf.PreflightError) as exc:
            pf.check_writable(tmp_path / "baselines" / "cpu-x-2c")
    finally:
        os.chmod(tmp_path / "baselines", 0o755)
    assert f"{tmp_path / 'baselines'} is not writable (Permission denied); make it writable" in str(exc.value)


def test_a_file_in_the_way_is_named(tmp_path):
    (tmp_path / "baselines").write_text("")
    with pytest.raises(pf.PreflightError, match="is a file, not a folder"):
        pf.check_writable(tmp_path / "baselines" / "cpu-x-2c")


# ---- suite lock ---------------------------------------------------------------------------------------------------
HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from perfsuite.machine.preflight import SuiteLock
    lock = SuiteLock(exclusive=sys.argv[2] == "exclusive", directory=Path(sys.argv[1]),
                     command="pytest tests/perf --perf-update-baselines", measuring=sys.argv[2] == "measuring")
    lock.acquire()
    print("held", flush=True)
    sys.stdin.read()  # hold until the parent closes stdin
""")


@pytest.fixture
def holder(tmp_path):
    procs = []

    def start(mode):
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "lock"), mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        for pipe in (p.stdin, p.stdout):  # (a test may have closed stdin to end its holder)
            if pipe is not None:
                pipe.close()


@linux_only
def test_recording_run_refuses_while_another_run_holds_the_lock(tmp_path, holder):
    other = holder("shared")
    with pytest.raises(pf.LockBusy) as exc:
        pf.SuiteLock(exclusive=True, directory=tmp_path / "lock").acquire()
    msg = str(exc.value)
    assert f"pid {other.pid}" in msg and "pytest tests/perf --perf-update-baselines" in msg
    assert "another perfsuite run is using this machine" in msg and [h.pid for h in exc.value.holders] == [other.pid]
    with pf.SuiteLock(exclusive=False, directory=tmp_path / "lock"):  # two ordinary runs may share
        pass


@linux_only
def test_ordinary_run_is_told_a_recording_is_in_progress(tmp_path, holder):
    rec = holder("exclusive")
    with pytest.raises(pf.LockBusy) as exc:
        pf.SuiteLock(exclusive=False, directory=tmp_path / "lock").acquire()
    assert "a baseline is being recorded on this machine" in str(exc.value)
    assert f"a recording run (--perf-update-baselines), pid {rec.pid}" in str(exc.value)


@linux_only
def test_a_measuring_run_waits_for_another_then_takes_the_lock(tmp_path, holder):
    """Two ordinary runs at once slowed each other ~4x (issue 40): the second waits, saying for whom, then
    measures alone."""
    other = holder("measuring")
    with pytest.raises(pf.LockBusy, match="another perfsuite run is measuring on this machine"):
        pf.SuiteLock(exclusive=False, measuring=True, directory=tmp_path / "lock").acquire()  # no wait: refused
    said: list[str] = []
    release = threading.Timer(1.0, other.stdin.close)  # the other run ends a second from now
    release.start()
    lock = pf.SuiteLock(exclusive=False, measuring=True, directory=tmp_path / "lock").acquire(wait_s=60,
                                                                                          say=said.append)
    try:
        assert other.wait(timeout=10) == 0 and lock.holders() == []
    finally:
        lock.release()
    release.join()
    assert len(said) == 1 and "waiting up to 60 s for another perfsuite run" in said[0]
    assert f"a perfsuite run measuring, pid {other.pid}" in said[0]


@linux_only
def test_a_waiting_run_gives_up_in_one_line_and_holds_nothing(tmp_path, holder):
    other = holder("measuring")
    lock = pf.SuiteLock(exclusive=False, measuring=True, directory=tmp_path / "lock")
    with pytest.raises(pf.LockBusy, match=r"still measuring on this machine after 1 s of waiting .*pid "
                                          rf"{other.pid}.*PERFSUITE_LOCK_WAIT_S"):
        lock.acquire(wait_s=0.6)
    assert lock._fd is None and sorted(p.name for p in (tmp_path / "lock").iterdir()) == [
        f"holder-{other.pid}.json", "suite.lock"]


@pytest.mark.parametrize(("raw", "wait"), [("", pf.LOCK_WAIT_S), ("0", 0.0), (" 600 ", 600.0), ("abc", None),
                                          ("-1", None), ("nan", None)])
def test_lock_wait_from_the_environment(raw, wait):
    if wait is None:
        with pytest.raises(pf.PreflightError, match=r"PERFSUITE_LOCK_WAIT_S=.* is not a number of seconds >= 0"):
            pf.lock_wait_s({"PERFSUITE_LOCK_WAIT_S": raw})
    else:
        assert pf.lock_wait_s({"PERFSUITE_LOCK_WAIT_S": raw}) == wait


@linux_only
def test_a_killed_holder_releases_the_lock(tmp_path, holder):
    dead = holder("exclusive")
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait()
    lock = pf.SuiteLock(exclusive=True, directory=tmp_path / "lock")
    with lock:
        assert lock.holders() == []  # the dead holder's pid file was cleaned up
        assert not (tmp_path / "lock" / f"holder-{dead.pid}.json").exists()
    assert sorted(p.name for p in (tmp_path / "lock").iterdir()) == ["suite.lock"]


# ---- load ---------------------------------------------------------------------------------------------------------
SPIN = "import time\nend = time.time() + 30\nwhile time.time() < end:\n    pass\n"
SAMPLE = ("import json, sys; from perfsuite.machine.preflight import sample_load; "
          "print(json.dumps(sample_load(1.0, top_n=100_000).as_dict()))")  # every process that ran is listed


@pytest.fixture
def spinner():
    p = subprocess.Popen([sys.executable, "-c", SPIN])
    time.sleep(0.2)
    yield p
    p.kill()
    p.wait()


@linux_only
def test_busy_process_outside_the_run_is_seen_and_named(spinner):
    """Sampled from a sibling process: the spinner is not in the sampler's tree, so it counts as "other". How much
    of a core it gets depends on what else the machine runs; that it ran, and a sleeping process did not, does not."""
    import json

    with subprocess.Popen(["sleep", "30"]) as sleeper:
        try:
            out = subprocess.run([sys.executable, "-c", SAMPLE], capture_output=True, text=True, check=True,
                                 cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
        finally:
            sleeper.kill()
    s = json.loads(out)
    listed = {o["pid"]: o["cores"] for o in s["top"]}
    assert listed.get(spinner.pid, 0) > 0, s  # named, with the CPU it used
    assert sleeper.pid not in listed, s  # a process that used no CPU is not "other work"
    assert s["other_cores"] >= listed[spinner.pid] - 0.05 and s["available"]


@linux_only
def test_own_process_tree_is_not_counted_as_other(spinner):
    s = pf.sample_load(1.0, top_n=100_000)  # the spinner is our child; every other process that ran is listed
    assert spinner.pid not in [o.pid for o in s.top]
    assert s.own_cores > 0 and s.busy_cores >= s.own_cores - 0.05


@linux_only
def test_check_load_refuses_past_the_threshold(spinner):
    # judged as a run rooted at an unrelated idle process, this process's child (the spinner) is "other" work
    with subprocess.Popen(["sleep", "30"]) as idle:
        try:
            verdict = pf.check_load(pf.LoadPolicy(max_other_cores=0.0, interval_s=0.3), root=idle.pid)
        finally:
            idle.kill()
    assert not verdict.ok and "cores used outside this run (allowed 0.00)" in verdict.message()
    assert "Stop the other work" in verdict.message()
    assert pf.check_load(pf.LoadPolicy(max_other_cores=64, max_steal_cores=64, interval_s=0.1)).ok


def test_unusable_lock_folder_is_a_preflight_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(pf.PreflightError, match=r"cannot create the suite lock .* set XDG_RUNTIME_DIR or TMPDIR"):
        pf.SuiteLock(exclusive=True, directory=tmp_path / "file" / "lock").acquire()
