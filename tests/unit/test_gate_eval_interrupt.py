"""benchmarks/gate_eval.py stopped with Ctrl-C (``kill -INT -- -PGID``) lets the trial it runs clean up.

Campaign 7 stopped this way left ``/tmp/perfsuite-workers-*`` behind: ``subprocess.run`` SIGKILLs its child 0.25 s
after a KeyboardInterrupt, before the interrupted pytest had removed its worker folder. ``run_child`` forwards one
SIGINT and waits for the child. The child here needs 1 s to clean up after its interrupt, four times that window."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gate_eval.py"

CHILD = """
import pathlib, sys, time
d = pathlib.Path(sys.argv[1])
(d / "ready").write_text("")
try:
    time.sleep(120)
except KeyboardInterrupt:
    time.sleep(1.0)  # removing worker folders and a worktree takes a while
    (d / "cleaned").write_text("")
"""

OUTER = """
import importlib.util, pathlib, sys
spec = importlib.util.spec_from_file_location("gate_eval", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules["gate_eval"] = mod
spec.loader.exec_module(mod)
d = pathlib.Path(sys.argv[2])
mod.run_child([sys.executable, "-c", sys.argv[3], str(d)], cwd=d, env=None, grace_s=30)
"""


def test_an_interrupted_campaign_lets_its_trial_clean_up(tmp_path: Path) -> None:
    outer = subprocess.Popen([sys.executable, "-c", OUTER, str(SCRIPT), str(tmp_path), CHILD],
                             start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert outer.poll() is None and time.monotonic() < deadline, outer.communicate()[0]
        time.sleep(0.05)
    os.killpg(outer.pid, signal.SIGINT)  # the whole campaign's group, as `kill -INT -- -PGID` does
    out, _ = outer.communicate(timeout=60)
    assert "KeyboardInterrupt" in out  # the campaign itself still stops
    assert (tmp_path / "cleaned").exists(), "the trial was killed before its cleanup ran"


def test_a_campaign_started_in_the_background_still_stops_on_sigint(tmp_path: Path) -> None:
    """`nohup python gate_eval.py trials ... &` from a script: the shell starts it with SIGINT ignored. main() gives
    SIGINT back its KeyboardInterrupt, so `kill -INT -- -PGID` stops the campaign (it ran on regardless before)."""
    code = (f"import importlib.util, sys, time; sys.argv = ['gate_eval', 'report', {str(tmp_path)!r}]; "
            f"spec = importlib.util.spec_from_file_location('gate_eval', {str(SCRIPT)!r}); "
            "mod = importlib.util.module_from_spec(spec); sys.modules['gate_eval'] = mod; spec.loader.exec_module(mod); "
            "mod.cmd_report = lambda out: (print('ready', flush=True), time.sleep(60)); mod.main()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN), start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode != 0 and "KeyboardInterrupt" in out
