"""Ctrl-C during ``perfsuite ab``: the workers stop (whole process groups), the pairs already measured are written
(JSON marked interrupted) and said in one line, exit 130 without a traceback; no worker folder is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from test_ab_cli import make_tree  # tests/unit is on sys.path (rootdir conftest, prepend import mode)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _workers_of(tree: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        try:
            if "perfsuite.measure.worker" in " ".join(p.info["cmdline"] or []) and str(tree) in (p.info["cwd"] or ""):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_writes_the_pairs_done_and_exits_130(tmp_path: Path, how: str) -> None:
    """Ctrl-C signals the terminal's whole process group; SIGTERM (``timeout``, a cancelled job) the command alone,
    whose workers must not be orphaned with their folders."""
    a, b = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "ab.json"
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    # Ctrl-C in a terminal signals the whole foreground process group: a session of its own stands for the terminal.
    proc = subprocess.Popen([sys.executable, "-m", "perfsuite.cli", "ab", "--a", str(a), "--b", str(b), "--budget", "10m",
                             "--margin", "0.0001", "--json", str(out)], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not list(tmp.glob("perfsuite-workers-*/?0003.job.json")):  # pairs 1 and 2 are recorded
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "ab never reached its third pair"
            time.sleep(0.1)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr, stderr
    [line] = [ln for ln in stderr.splitlines() if "interrupted" in ln]
    assert line.startswith("perfsuite ab: interrupted after 2 pair(s)") and str(out) in line, stderr
    data = json.loads(out.read_text())
    assert data["stopped"] == "interrupted" and data["interrupted"] is True
    assert len(data["pairs"]) == 2 and {p["pair"] for p in data["pairs"]} == {1, 2}
    assert all(v["pairs"] == 2 for v in data["verdicts"])
    time.sleep(0.5)
    assert not _workers_of(a) and not _workers_of(b), "a worker outlived the interrupted ab"
    assert not list(tmp.glob("perfsuite-workers-*")), "the worker folders were left in the temp directory"
