"""SIGTERM as Ctrl-C: a CI job being cancelled, ``timeout``, ``kill`` and a supervisor's stop send SIGTERM, whose
default ends Python without running a single ``finally`` - leaving worker processes, their temp folders and a
confirmation worktree behind. Inside :func:`sigterm_as_interrupt` it raises :class:`Terminated` (a
KeyboardInterrupt), so the path every Ctrl-C takes cleans up after it too."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; handled like Ctrl-C."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum} (SIGTERM)")


def install() -> object | None:
    """Turn SIGTERM into :class:`Terminated` from now on; returns the previous handler for :func:`restore` (None when
    nothing was changed: not the main thread, or SIGTERM is ignored on purpose, as under ``nohup``-like launchers)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    old = signal.getsignal(signal.SIGTERM)
    if old is signal.SIG_IGN:
        return None
    signal.signal(signal.SIGTERM, _terminated)
    return old


def restore(old: object | None) -> None:
    if old is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, old)  # type: ignore[arg-type]


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    old = install()
    try:
        yield
    finally:
        restore(old)


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """For a long-running script (a benchmark that starts servers and workers): Ctrl-C works even when the process
    was started in the background by a shell script (``nohup ... &`` starts it with SIGINT *ignored*, so ``kill -INT``
    stops nothing), and SIGTERM takes the Ctrl-C path, so either ends it with its children."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with sigterm_as_interrupt():
        yield


def call(cmd: list[str], grace_s: float = 60.0, **popen: Any) -> int:
    """``subprocess.call`` for a child that cleans up after itself (a pytest run with worker processes): Ctrl-C and
    SIGTERM reach the child even when this process was started with SIGINT ignored, and the child is given
    ``grace_s`` to end its own children before it is killed (``subprocess.call`` kills it at once, orphaning them).
    Returns the child's exit code; 130 after Ctrl-C, 143 after SIGTERM."""
    with stoppable():  # SIGINT handled here, so the exec'd child starts with SIGINT at its default, not ignored
        proc = subprocess.Popen(cmd, **popen)
        try:
            return proc.wait()
        except KeyboardInterrupt as exc:
            term = isinstance(exc, Terminated)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM if term else signal.SIGINT)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return 143 if term else 130
