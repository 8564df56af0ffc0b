from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfsuite.facts import config as cfg
from perfsuite.facts.errors import UsageError, reraise_as
from perfsuite.facts.schema import parse_duration as parse_duration  # re-exported: the commands' one duration parser


def add_command(sub: Any, name: str, help_: str, doc: str | None,
                main: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` shows its module docstring as written, run by ``main``."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=doc,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=main)
    return p


def usage_errors(*errors: type[Exception]) -> contextlib.AbstractContextManager[None]:
    """Re-raise another module's ``errors`` (bad input: a config, a policy, an option value) as a UsageError."""
    return reraise_as(UsageError, *errors)


def project_root() -> Path:
    """The checkout holding ``[tool.perfsuite]`` and tests/perf, searched upwards from the working directory.
    Outside one: ``SystemExit`` with a ``perfsuite: run this inside a perfsuite checkout ...`` line, exit status 1
    (not a UsageError's ``perfsuite <command>: ...`` and 2)."""
    pyproject = cfg.find_pyproject(Path.cwd())
    if pyproject is None or not (pyproject.parent / "tests" / "perf").is_dir():
        raise SystemExit("perfsuite: run this inside a perfsuite checkout (no pyproject.toml with [tool.perfsuite] "
                         "and tests/perf/ above the current directory)")
    return pyproject.parent


def check_locations(*items: tuple[Path | None, str, str], cache: bool = False) -> None:
    """Before any work: every output location (``(path, option, "file" | "folder")``) and, with ``cache`` (a
    command that measures here), the model cache takes a file and the thread-count variables are readable; else
    one UsageError line naming the option or variable and the fix."""
    from perfsuite.machine import precheck

    todo = list(items)
    if cache:
        path, named_by = precheck.cache_location(None)
        todo.append((path, named_by, "folder"))
    with usage_errors(precheck.PreflightError):
        precheck.check_locations(todo)
        if cache:
            precheck.check_thread_env(os.environ)


@contextlib.contextmanager
def measuring(command: str) -> Iterator[None]:
    """Held while a command measures here: the suite lock an ordinary pytest run takes, so two perfsuite runs do not
    slow each other. Another run measuring: wait for it (``PERFSUITE_LOCK_WAIT_S``), saying so once, then a
    UsageError line naming it."""
    from perfsuite.machine import preflight

    def say(line: str) -> None:
        print(line.replace("perfsuite:", f"perfsuite {command}:", 1), file=sys.stderr, flush=True)

    with usage_errors(preflight.PreflightError):
        lock = preflight.SuiteLock(exclusive=False, measuring=True).acquire(wait_s=preflight.lock_wait_s(), say=say)
    try:
        yield
    finally:
        lock.release()


def thread_mode(text: str) -> str:
    """argparse type of ``--threads``: auto | cell | a thread count (perfsuite.machine.cotenant)."""
    from perfsuite.machine import cotenant

    try:
        cotenant.parse_mode(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


class Progress:
    """Progress of a long command: one rewritten line on a terminal, plain lines in CI logs."""

    def __init__(self, min_interval_s: float = 0.0) -> None:
        self.stream = sys.stderr
        self.tty = self.stream.isatty()
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._width = 0

    def update(self, text: str) -> None:
        now = time.monotonic()
        if not self.tty and now - self._last < self.min_interval_s:
            return
        self._last = now
        if self.tty:
            self.stream.write("\r" + text + " " * (self._width - len(text)))  # blanks the rest of a longer line
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.flush()
