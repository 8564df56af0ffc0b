"""Checks of a command's surroundings before any work starts, each failing with one line that names the option or
variable and the fix (:class:`perfsuite.machine.preflight.PreflightError`): every output and the model cache take a
new file, tried for real (``/proc/x`` or a read-only mount fails now, not as a traceback once the workers run), and
no thread count is one the OpenMP/MKL/OpenBLAS runtimes would silently ignore.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from perfsuite.machine.preflight import PreflightError, nearest_existing, try_write

__all__ = ["DEFAULT_CACHE", "PreflightError", "cache_location", "check_locations", "check_thread_env"]


def check_locations(locations: Iterable[tuple[Path | None, str, str]]) -> None:
    """Every output and cache location of a command, checked before any work: ``(path, named_by, kind)`` with
    ``named_by`` the option (``--out``), variable (``PERFSUITE_CACHE_DIR``) or setting that chose it and ``kind``
    "folder" (created if missing) or "file" (its folder must take it). PreflightError names the first bad one and
    the fix; ``None`` paths (an option not given) are skipped."""
    for path, named_by, kind in locations:
        if path is None:
            continue
        path = Path(path).expanduser()
        folder = path.parent if kind == "file" else path
        probe = nearest_existing(folder)
        shown = f"{named_by}={path}" if named_by.isupper() else f"{named_by} {path}"
        fix = _fix(named_by, kind)
        if kind == "file" and path.is_dir():
            raise PreflightError(f"{shown}: a folder, not a file; {fix}")
        if not probe.is_dir():
            raise PreflightError(f"{shown}: {probe} is a file, not a folder; {fix}")
        err = try_write(probe)
        if err is not None:
            raise PreflightError(f"{shown}: {probe} is not writable ({err.strerror}); {fix}")


def _fix(named_by: str, kind: str) -> str:
    if named_by.startswith("-"):
        return f"pass {named_by} a writable {'path' if kind == 'file' else 'folder'}"
    if named_by.isupper():
        return f"set {named_by} to a writable folder"
    if named_by == DEFAULT_CACHE:
        return "set PERFSUITE_CACHE_DIR to a writable folder"
    return f"point {named_by} at a writable folder"


DEFAULT_CACHE = "the default cache"


# OpenMP reads a list of positive counts (one per nesting level); MKL and OpenBLAS one count. A value they cannot
# read is ignored without a word and every core is used: a measurement of another configuration than asked for.
_THREAD_ENV = {"OMP_NUM_THREADS": re.compile(r"\s*[1-9]\d*(\s*,\s*[1-9]\d*)*\s*"),
               "MKL_NUM_THREADS": re.compile(r"\s*[1-9]\d*\s*"), "OPENBLAS_NUM_THREADS": re.compile(r"\s*[1-9]\d*\s*")}


def check_thread_env(env: Mapping[str, str]) -> None:
    """PreflightError for a thread-count variable the runtimes would silently ignore (``OMP_NUM_THREADS=abc``)."""
    for name, form in _THREAD_ENV.items():
        value = env.get(name)
        if value is not None and value != "" and not form.fullmatch(value):
            raise PreflightError(f"{name}={value!r}: not a thread count (the runtime ignores it without a word and "
                                 f"uses every core); set a whole number >= 1 (e.g. {name}=2) or unset it")


def cache_location(configured: Path | None) -> tuple[Path, str]:
    """The model/artefact cache and what chose it: [tool.perfsuite] cache_dir > PERFSUITE_CACHE_DIR > default."""
    from perfsuite.facts import models

    if configured is not None:
        return Path(configured), "[tool.perfsuite] cache_dir"
    if os.environ.get("PERFSUITE_CACHE_DIR"):
        return models.default_cache_dir(), "PERFSUITE_CACHE_DIR"
    return models.default_cache_dir(), DEFAULT_CACHE
