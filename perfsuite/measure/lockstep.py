"""Lockstep pairs: the two worker processes of an A/B pair alive at the same time, taking turns generation by
generation, so that the machine's drift falls on both sides of every pair alike (docs/gate.md, "Lockstep pairs";
the measurements behind it: docs/gate-evaluation.md, benchmarks/lockstep_timescale.py).

Protocol (a Unix stream socket per side, one byte each way): before each generation (warm-up ones included) and
once after the last, the worker sends ``r`` and waits for ``g`` (run the next generation) or ``f`` (run freely to
the end). The :class:`Conductor` (driven by perfsuite.measure.scheduler.measure_pair) waits until both sides are
loaded, gives the turns (each round's order a coin flip), then ``f`` to both, so neither side's teardown overlaps
the other's timed generation. A worker without a coordinator runs freely: this orders work, it never times it.

Freezing (``freeze=True``, vLLM cells): the waiting side's whole process group is stopped (SIGSTOP) from the moment it
hands its turn back until it gets the next one (SIGCONT, then ``g``): an idle vLLM model worker polls its message
queue busily for about a second, on the cores of the side timed next (docs/gate.md, "vLLM pairs: the waiting side
is frozen", with the measurements).
"""

from __future__ import annotations

import contextlib
import os
import random
import selectors
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

VERSION = 1  # what a worker's probe reports (``lockstep``); a tree without it gets sequential pairs
READY, GO, FREE = b"r", b"g", b"f"


class LockstepError(Exception):
    """A side stopped answering its turns (its process died, or a turn outlasted the timeout)."""


# --------------------------------------------------------------------------------------------- worker side
class Gate:
    """The worker's end: ``turn()`` before each generation and once after the last."""

    def __init__(self, sock: socket.socket | None) -> None:
        self._sock = sock

    @staticmethod
    def connect(address: str | None, timeout_s: float = 30.0) -> Gate:
        if not address:
            return Gate(None)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout_s)
            s.connect(address)
            s.settimeout(None)
        except OSError:
            s.close()
            return Gate(None)  # no coordinator to take turns with: run freely
        return Gate(s)

    @property
    def active(self) -> bool:
        return self._sock is not None

    def turn(self) -> None:
        if self._sock is None:
            return
        try:
            self._sock.sendall(READY)
            got = self._sock.recv(1)
        except OSError:
            got = b""
        if got != GO:  # FREE, or the coordinator is gone
            self.close()

    def close(self) -> None:
        s, self._sock = self._sock, None
        if s is not None:
            s.close()


# ---------------------------------------------------------------------------------------- coordinator side
class Conductor:
    """The coordinator's end for one pair: a listening socket per side in a short-lived folder of its own."""

    def __init__(self, sides: Sequence[str], turn_timeout_s: float = 600.0, freeze: bool = False) -> None:
        self.sides = list(sides)
        self.turn_timeout_s = turn_timeout_s
        self.freeze = freeze
        self._group: dict[str, int] = {}  # side -> the process group its worker leads (freezing)
        self._frozen: set[str] = set()
        self._tree: dict[str, list[int]] = {}
        self._dir = Path(tempfile.mkdtemp(prefix="psl-"))  # short: AF_UNIX paths are limited to ~107 bytes
        self._listen: dict[str, socket.socket] = {}
        self._conn: dict[str, socket.socket] = {}
        for s in self.sides:
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            ls.bind(str(self._dir / s))
            ls.listen(1)
            ls.setblocking(False)
            self._listen[s] = ls

    def address(self, side: str) -> str:
        return str(self._dir / side)

    def track(self, side: str, pgid: int) -> None:
        """The process group ``side``'s worker leads (its engine's processes are in it too): what freezing stops."""
        self._group[side] = pgid

    def _signal(self, side: str, sig: signal.Signals) -> None:
        pgid = self._group.get(side)
        if pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def _stop(self, side: str) -> None:
        """SIGSTOP to the side's process group, then wait (at most ``STOP_WAIT_S``) until its worker and the worker's
        descendants all show as stopped: the signal is asynchronous, a busy process takes a moment to take it."""
        if not (self.freeze and side in self._conn):
            return
        self._signal(side, signal.SIGSTOP)
        self._frozen.add(side)
        if side not in self._tree:  # the worker and its engine's processes, once loaded (the first stop)
            self._tree[side] = _descendants(self._group.get(side, 0))
        deadline = time.monotonic() + STOP_WAIT_S
        while not all(_stopped(pid) for pid in self._tree[side]) and time.monotonic() < deadline:
            time.sleep(0.0005)

    def _cont(self, side: str) -> None:
        if side in self._frozen:
            self._frozen.discard(side)
            self._signal(side, signal.SIGCONT)

    def wait_ready(self, ended: Callable[[str], bool], timeout_s: float = 1800.0) -> list[str]:
        """Wait until every side has connected and sent its first ``r`` (loaded, before its first generation).
        Returns the sides that are ready; a side whose process ``ended`` first (a skip, a failure) is left out."""
        deadline = time.monotonic() + timeout_s
        pending = set(self.sides)
        ready: list[str] = []
        with selectors.DefaultSelector() as sel:
            for s in self.sides:
                sel.register(self._listen[s], selectors.EVENT_READ, ("listen", s))
            while pending:
                if time.monotonic() > deadline:
                    raise LockstepError(f"side(s) {', '.join(sorted(pending))} not ready after {timeout_s:.0f} s")
                for key, _ in sel.select(timeout=0.05):
                    what, s = key.data
                    if what == "listen":
                        conn, _ = self._listen[s].accept()
                        conn.setblocking(True)
                        self._conn[s] = conn
                        sel.unregister(self._listen[s])
                        sel.register(conn, selectors.EVENT_READ, ("conn", s))
                    else:
                        sel.unregister(key.fileobj)
                        pending.discard(s)
                        if self._conn[s].recv(1) == READY:
                            ready.append(s)
                        else:
                            self._drop(s)  # connected, then ended before its first generation
                for s in list(pending):
                    if ended(s):
                        pending.discard(s)
                        self._drop(s)
        for s in ready:  # loaded and waiting for its first turn
            self._stop(s)
        return [s for s in self.sides if s in ready]

    def turn(self, side: str) -> None:
        """One generation of ``side``: ``g``, then wait for its ``r``."""
        conn = self._conn.get(side)
        if conn is None:
            raise LockstepError(f"side {side.upper()} is not taking turns")
        conn.settimeout(self.turn_timeout_s)
        self._cont(side)
        try:
            conn.sendall(GO)
            got = conn.recv(1)
        except TimeoutError:
            raise LockstepError(f"side {side.upper()}: a generation outlasted {self.turn_timeout_s:.0f} s") from None
        except OSError as exc:
            got, why = b"", str(exc)
        else:
            why = "it ended mid-run"
        if got != READY:
            self._drop(side)
            raise LockstepError(f"side {side.upper()} stopped taking turns ({why})")
        self._stop(side)

    def run_rounds(self, rounds: dict[str, int], rng: random.Random) -> list[str]:
        """``rounds[side]`` turns each; every round both sides (while they have turns left) in coin-flip order.
        Returns the orders, e.g. ``["AB", "BA", ...]``."""
        orders = []
        for r in range(max(rounds.values(), default=0)):
            now = [s for s in self.sides if r < rounds[s]]
            rng.shuffle(now)
            for s in now:
                self.turn(s)
            orders.append("".join(s.upper() for s in now))
        return orders

    def release(self) -> None:
        """``f`` to every side still connected: each runs to its end freely (its result, its teardown); a frozen side
        is continued as it is dropped (the ``f`` waits in its socket)."""
        for s in list(self._conn):
            with contextlib.suppress(OSError):
                self._conn[s].sendall(FREE)
            self._drop(s)

    def _drop(self, side: str) -> None:
        self._cont(side)
        c = self._conn.pop(side, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        self.release()
        for ls in self._listen.values():
            ls.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Conductor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


STOP_WAIT_S = 0.5


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))] if pid else []
    except psutil.Error:
        return []


def _stopped(pid: int) -> bool:
    """State T (stopped) or gone, from /proc/PID/stat."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("T", "t", "Z", "X")


def supported(facts: dict[str, Any]) -> bool:
    """Whether a side's probe (``python -m perfsuite.measure.worker probe``) says its workers take turns."""
    return int(facts.get("lockstep") or 0) >= VERSION

