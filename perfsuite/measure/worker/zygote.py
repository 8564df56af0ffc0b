"""The coordinator's handle on one zygote: a pre-imported interpreter (``python -m perfsuite.measure.worker
serve``) that forks a fresh worker per job.

A zygote may serve both sides of an A/B (perfsuite.measure.worker.pool.pair_pools says why); each child then
imports its side's tree (``"tree"`` in the request). Replies are told apart by pid: a shared zygote runs the two
workers of a lockstep pair at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from perfsuite.machine.external import kill_group
from perfsuite.measure.worker import layout

if TYPE_CHECKING:
    from perfsuite.measure.worker.pool import Side


class ZygoteError(Exception):
    """The zygote died or did not answer; one line with its log's last line."""


def signal_text(status: int) -> str:
    if status < 0:
        try:
            return f"killed by signal {-status} ({signal.Signals(-status).name})"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


def tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


class Zygote:
    def __init__(self, side: Side, workdir: Path, preload: tuple[str, ...], shared: bool = False) -> None:
        self.side = side
        self.preload = preload
        self.shared = shared  # serves several trees: requests name the child's tree
        self.log = workdir / f"zygote{side.label}.log"
        self.proc: subprocess.Popen[str] | None = None
        self._sel: selectors.BaseSelector | None = None
        self._buf = ""
        self._exited: dict[int, int] = {}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        log = open(self.log, "a")
        self.proc = subprocess.Popen(self.side.argv("perfsuite.measure.worker", "serve"), cwd=self.side.tree,
                                     env=self.side.environ(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, text=True, bufsize=1, start_new_session=True,
                                     preexec_fn=layout.preexec(self.side.fixed_layout))
        log.close()
        self._sel = selectors.DefaultSelector()
        self._buf = ""
        self._exited = {}
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.send({"op": "preload", "modules": [self.side.module(m) for m in self.preload]})
        self.recv(timeout_s=600)

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def recv(self, timeout_s: float) -> dict[str, Any] | None:
        """Next reply, or None on timeout. A dead zygote is an error with its log."""
        assert self.proc is not None and self._sel is not None
        stream: IO[str] = self.proc.stdout  # type: ignore[assignment]
        deadline = time.monotonic() + timeout_s
        while "\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self._sel.select(timeout=min(left, 1.0)):
                chunk = stream.read()
                if chunk == "" and self.proc.poll() is not None:
                    raise ZygoteError(self._death())
                self._buf += chunk or ""
            elif self.proc.poll() is not None:
                raise ZygoteError(self._death())
        line, self._buf = self._buf.split("\n", 1)
        return dict(json.loads(line))

    def _death(self) -> str:
        assert self.proc is not None
        last = tail(self.log).strip()
        return (f"worker zygote of {self.side.tree} {signal_text(self.proc.returncode)}: "
                f"{last.splitlines()[-1] if last else 'no output'}")

    def fork(self, job: Path, out: Path, log: Path, tree: Path) -> int:
        """Start one child on ``job``; its pid. (Started first if it is not running.)"""
        if not self.alive():
            self.start()
        req: dict[str, Any] = {"op": "measure", "job": str(job), "out": str(out), "log": str(log)}
        if self.shared:
            req["tree"] = str(tree)
        self.send(req)
        while self._note_exit(msg := self.recv(timeout_s=120)):  # another child's end, awaited elsewhere
            pass
        if not msg or msg.get("event") != "started":
            raise ZygoteError(f"worker zygote of {self.side.tree} did not start a child: {msg}")
        return int(msg["pid"])

    def _note_exit(self, msg: dict[str, Any] | None) -> bool:
        if msg is None or msg.get("event") != "exited":
            return False
        self._exited[int(msg["pid"])] = int(msg.get("status", -9))
        return True

    def exit_status(self, pid: int, timeout_s: float) -> int | None:
        """The exit status of child ``pid`` once it ended, or None if it did not within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while pid not in self._exited:
            msg = self.recv(timeout_s=max(deadline - time.monotonic(), 0.0))
            if msg is None:
                return None
            self._note_exit(msg)
        return self._exited.pop(pid)

    def close(self) -> None:
        z, self.proc = self.proc, None
        if z is None:
            return
        try:
            if z.poll() is None:
                assert z.stdin is not None
                with contextlib.suppress(OSError, ValueError):
                    z.stdin.write(json.dumps({"op": "exit"}) + "\n")
                    z.stdin.close()
                z.wait(timeout=10)
        except BaseException as exc:  # it did not go, or Ctrl-C while it says goodbye
            kill_group(z.pid, or_alone=True)
            z.wait()
            if not isinstance(exc, (subprocess.TimeoutExpired, OSError)):
                raise
        finally:
            if self._sel is not None:
                self._sel.close()
                self._sel = None
            for stream in (z.stdin, z.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
