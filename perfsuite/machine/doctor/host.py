"""The doctor's window on the machine: environment, files, commands. Tests pass a fake with captured outputs."""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from perfsuite.machine.external import run_tool


def _run(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    """(rc, stdout, stderr); a tool that hung or wrote bytes that are not UTF-8 gives its nonzero rc and the reason
    as stderr (:func:`perfsuite.machine.external.run_tool`), so each probe reports it as an error."""
    r = run_tool(cmd, timeout)
    return (r.rc, "", r.problem) if r.problem else (r.rc, r.stdout, r.stderr)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


@dataclass
class Host:
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    run: Callable[[list[str], float], tuple[int, str, str]] = _run
    which: Callable[[str], str | None] = shutil.which
    read_text: Callable[[str], str | None] = _read_text
    glob: Callable[[str], list[str]] = lambda pattern: sorted(glob.glob(pattern))
    exists: Callable[[str], bool] = os.path.exists
    access: Callable[[str, int], bool] = os.access
    timeout_s: float = 15.0  # per tool; the doctor runs its tools concurrently

    def command(self, *cmd: str) -> tuple[int, str, str]:
        """Run a read-only query tool; (127, "", reason) when it is not installed."""
        if self.which(cmd[0]) is None:
            return 127, "", f"{cmd[0]} not found on PATH"
        return self.run(list(cmd), self.timeout_s)
