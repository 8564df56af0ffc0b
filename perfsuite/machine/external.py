"""Running an external program that should answer quickly: vendor query tools, git, a side's interpreter.

Each runs in its own process group (``start_new_session``), so a timeout or a Ctrl-C kills the tool *and* whatever it
started (a ``rocminfo`` wrapper script that waits on a child, an ``amd-smi`` that spawns helpers), not just its
shell. Its output must be UTF-8: a tool that writes other bytes is rejected with one line naming the tool and the
byte, never decoded into something that looks like a device.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NOT_FOUND, CANNOT_RUN, TIMED_OUT, BAD_OUTPUT = 127, 126, 124, 65  # rc of a ToolResult whose ``problem`` is set

_live: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class ToolResult:
    rc: int
    stdout: str
    stderr: str
    problem: str = ""  # why the output is unusable (not found, timed out, not UTF-8); "" when the tool answered

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.problem


def kill_group(pid: int, *, or_alone: bool = False) -> None:
    """SIGKILL the process group ``pid`` leads (the process and its children). With ``or_alone``, SIGKILL just ``pid``
    if that fails (a forked worker killed before its ``setsid``); not after a reap: another process may have its pid."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if or_alone:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def kill_all() -> None:
    """Kill every tool still running (another thread's): for the Ctrl-C of a command that runs tools in threads."""
    with _lock:
        procs = list(_live)
    for p in procs:
        kill_group(p.pid)


def run_tool(cmd: Sequence[str], timeout_s: float, *, cwd: str | os.PathLike[str] | None = None,
             env: Mapping[str, str] | None = None) -> ToolResult:
    """Run ``cmd`` to completion within ``timeout_s``; never raises for a missing, hanging or garbling tool."""
    name = os.path.basename(cmd[0])
    try:
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=cwd, env=dict(env) if env is not None else None, start_new_session=True)
    except FileNotFoundError:
        return ToolResult(NOT_FOUND, "", "", f"{name} not found")
    except OSError as exc:
        return ToolResult(CANNOT_RUN, "", "", f"{name} cannot be run ({exc.strerror or exc})")
    with _lock:
        _live.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, err = proc.communicate()
        return ToolResult(TIMED_OUT, _lenient(out), _lenient(err),
                          f"{name} did not answer within {timeout_s:g} s (killed it and its children)")
    except BaseException:  # Ctrl-C, or a kill_all() from another thread
        kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        with _lock:
            _live.discard(proc)
    kill_group(proc.pid)  # a tool that exited but left a child behind in its group
    try:
        return ToolResult(proc.returncode, out.decode("utf-8"), _lenient(err))
    except UnicodeDecodeError as exc:
        bad = out[exc.start]
        return ToolResult(BAD_OUTPUT, "", _lenient(err), f"{name} wrote output that is not UTF-8 (byte 0x{bad:02x} at "
                          f"offset {exc.start}); output rejected")


def _lenient(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", errors="replace")
