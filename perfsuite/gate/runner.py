"""Run the perf tests in a separate process (one process run = one statistical unit of the gate).

Used by ``perfsuite ab`` and ``perfsuite calibrate`` and by benchmarks/gate_eval.py to collect run files.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INJECT_ENV = "PERFSUITE_INJECT_DECODE_SLOWDOWN"  # honoured by perfsuite/backends/torch_backend.py
DEFAULT_TESTS = "tests/perf/test_latency.py"


@dataclass(frozen=True)
class Env:
    """One side of an A/B run: an interpreter, or a full command prefix (e.g. ``tox -e a --``)."""

    label: str
    python: str | None = None
    cmd: str | None = None
    env: tuple[tuple[str, str], ...] = ()

    def argv(self) -> list[str]:
        if self.cmd:
            return shlex.split(self.cmd)
        return [self.python or sys.executable, "-m", "pytest"]


def run_once(env: Env, out_json: Path, pytest_args: list[str], cwd: Path, timeout_s: float = 1800,
             tests: str = DEFAULT_TESTS, profile: str | None = "smoke") -> tuple[int, float, str]:
    """One process run; returns (exit code, wall seconds, tail of its output). The JSON lands in ``out_json``."""
    argv = [*env.argv(), tests, "-q", "-p", "no:cacheprovider", f"--benchmark-json={out_json}"]
    if profile and not any(a.startswith("--perf-profile") for a in pytest_args):
        argv.append(f"--perf-profile={profile}")
    argv += pytest_args
    proc_env = dict(os.environ)
    proc_env.pop(INJECT_ENV, None)
    proc_env.update(dict(env.env))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=cwd, env=proc_env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return 124, time.perf_counter() - t0, f"timed out after {timeout_s:.0f} s: {' '.join(argv)}"
    tail = (proc.stdout + proc.stderr)[-2000:]
    return proc.returncode, time.perf_counter() - t0, tail


def load(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf8"))
