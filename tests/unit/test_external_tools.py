"""Hostile vendor tools: one that hangs (and leaves children), one that writes bytes that are not UTF-8. The doctor
runs each tool in its own process group, kills the whole group on timeout and on Ctrl-C, and says what happened."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from perfsuite.machine import doctor
from perfsuite.machine.doctor.host import Host

TOOLS = ("rocminfo", "amd-smi", "rocm-smi", "nvidia-smi")


def _marked(marker: str, name: str = "") -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "name"]):
        if marker in " ".join(p.info["cmdline"] or []) and p.info["name"] in (name or p.info["name"]):
            out.append(p)
    return out


def _gone(marker: str, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _marked(marker):
            return True
        time.sleep(0.05)
    return False


def _fake_tools(tmp_path: Path, body: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in TOOLS:
        f = bin_dir / name
        f.write_text(f"#!/bin/sh\n{body}\n")
        f.chmod(0o755)
    return bin_dir


def test_hanging_tools_are_killed_whole_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"{os.getpid() % 1000 + 131}.25"  # a unique sleep length identifies this test's grandchildren
    bin_dir = _fake_tools(tmp_path, f"sleep {marker}; echo late")  # the shell waits on a child: two processes
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    t0 = time.monotonic()
    r = doctor.collect("auto", host=Host(timeout_s=1.5), use_torch=False)
    took = time.monotonic() - t0
    assert _gone(marker), f"orphaned children of the timed-out tools: {_marked(marker)}"
    assert took < 4 * 1.5, f"the tools ran one after another ({took:.1f} s)"
    timed_out = {s.name: s for s in r.sources if s.name in TOOLS}
    assert all(s.status == "error" and "did not answer within 1.5 s" in s.detail for s in timed_out.values()), \
        timed_out
    said = [f.message for f in r.findings if f.topic == "source"]
    assert len(said) == 4 and all("did not answer within 1.5 s" in m for m in said), said


def test_non_utf8_output_is_rejected_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _fake_tools(tmp_path, r"printf 'GPU \377 0\n'")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    r = doctor.collect("auto", host=Host(timeout_s=5), use_torch=False)
    assert not r.gpus
    by_name = {s.name: s for s in r.sources}
    for name in TOOLS:
        assert by_name[name].status == "error"
        assert "not UTF-8" in by_name[name].detail and "0xff" in by_name[name].detail, by_name[name]
    assert any(f.topic == "source" and f.message.startswith("nvidia-smi") and "not UTF-8" in f.message
               for f in r.findings)


def test_ctrl_c_kills_the_tools_process_group(tmp_path: Path) -> None:
    marker = f"{os.getpid() % 1000 + 171}.75"
    script = ("import sys; from perfsuite.machine.external import run_tool; print('started', flush=True); "
              f"run_tool(['sh', '-c', 'sleep {marker}; echo late'], 60)")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 10
        while not _marked(marker, "sleep") and time.monotonic() < deadline:  # the tool's child: it is running
            time.sleep(0.05)
        assert _marked(marker, "sleep"), "the tool never started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err
    assert _gone(marker), f"Ctrl-C left the tool's children running: {_marked(marker)}"
