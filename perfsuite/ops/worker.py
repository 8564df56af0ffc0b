"""Subprocess runner: risky cells run in a child process so a device fault kills one cell, not the session.

Protocol: the parent writes one JSON request per line to the child's stdin (``{"op", "backend", "dtype", "shape",
"seed", "device", "check_kernels"}``); the child answers with one line ``@@perfsuite-ops@@ <CellResult JSON>``
(other stdout lines are library noise and ignored). If the child dies (signal, abort, ``exit``) or does not answer
within the timeout, the cell is classified ``crash`` with the exit status and the tail of the child's stderr, and
the next request starts a fresh child. The child imports torch/ORT once and is reused for many cells.

Run by hand: ``python -m perfsuite.ops.worker`` (reads requests from stdin).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from perfsuite.ops.runner import CellResult
from perfsuite.ops.shapes import Shape

MARK = "@@perfsuite-ops@@ "


class Worker:
    def __init__(self, timeout_s: float = 300.0, env: dict[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.stderr: Any = None
        self.crashes = 0

    def _start(self) -> subprocess.Popen[str]:
        self._release()
        self.stderr = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen([sys.executable, "-m", "perfsuite.ops.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True, bufsize=1, env=env)
        return self.proc

    def _stderr_tail(self, n: int = 8) -> list[str]:
        if self.stderr is None:
            return []
        self.stderr.seek(0)
        lines = [ln.rstrip() for ln in self.stderr.read().splitlines() if ln.strip() and "USDT" not in ln]
        return lines[-n:]

    def run(self, op: str, backend: str, dtype: str, shape: Shape, seed: int, device: str = "cpu",
            check_kernels: bool = True) -> CellResult:
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        req = {"op": op, "backend": backend, "dtype": dtype, "shape": shape.as_dict(), "seed": seed,
               "device": device, "check_kernels": check_kernels}
        t0 = time.perf_counter()
        try:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        deadline = t0 + self.timeout_s
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                proc.kill()
                proc.wait()
                return self._crash(req, t0, f"no answer within {self.timeout_s:.0f}s (hang); child killed")
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
            if not ready:
                continue
            line = proc.stdout.readline()
            if not line:  # EOF: the child died
                rc = proc.wait()
                how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"
                return self._crash(req, t0, f"worker process {how}")
            if line.startswith(MARK):
                return CellResult.from_dict(json.loads(line[len(MARK):]))

    def _crash(self, req: dict[str, Any], t0: float, why: str) -> CellResult:
        self.crashes += 1
        tail = self._stderr_tail()
        self._release()
        return CellResult(req["op"], req["backend"], req["dtype"], req["shape"], req["seed"], "crash",
                          detail=why + (f"; stderr: {tail[-1]}" if tail else ""),
                          seconds=time.perf_counter() - t0, extra={"stderr_tail": tail})

    def _release(self) -> None:
        """Close the pipes and the stderr file of the current child (dead or finished) and forget it."""
        if self.proc is not None:
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    if f is not None:
                        f.close()
                except OSError:
                    pass
        if self.stderr is not None:
            self.stderr.close()
        self.proc, self.stderr = None, None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._release()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main() -> int:
    from perfsuite.ops.runner import evaluate

    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        res = evaluate(req["op"], req["backend"], req["dtype"], Shape.from_dict(req["shape"]), req["seed"],
                       req.get("device", "cpu"), req.get("check_kernels", True))
        sys.stdout.write(MARK + json.dumps(res.as_dict()) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
