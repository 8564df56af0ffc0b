from __future__ import annotations

import os
from pathlib import Path

from perfsuite import config as cfg


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
    from perfsuite import precheck
    from perfsuite.errors import UsageError

    todo = list(items)
    if cache:
        path, named_by = precheck.cache_location(None)
        todo.append((path, named_by, "folder"))
    try:
        precheck.check_locations(todo)
        if cache:
            precheck.check_thread_env(os.environ)
    except precheck.PreflightError as exc:
        raise UsageError(str(exc)) from None


def parse_duration(text: str, what: str = "--budget") -> float:
    """``90s``, ``2m``, ``1h30m``, ``1.5m`` or plain seconds -> seconds; a clear UsageError otherwise."""
    import re

    from perfsuite.errors import UsageError

    t = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*(h|m|min|s|sec)", t)
        if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*(h|m|min|s|sec)", "", t).strip():
            raise UsageError(f"{what} {text!r} is not a duration; write e.g. 90s, 2m, 5m or 1h")
        unit = {"h": 3600, "m": 60, "min": 60, "s": 1, "sec": 1}
        seconds = sum(float(n) * unit[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"{what} {text!r} must be longer than 0 s")
    return seconds
