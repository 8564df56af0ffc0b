"""Run history: every run's pytest-benchmark JSON (and A/B results) in one SQLite file (docs/history.md).

``open_history(resolve_db(...))`` -> :class:`History`; ``ingest(db, paths)``; reading: the ``query`` module. Where
the database is, first found wins: ``--db`` > ``$PERFSUITE_HISTORY`` > ``history`` in ``[tool.perfsuite]`` (relative
to pyproject.toml) > ``$XDG_DATA_HOME/perfsuite/history.sqlite``."""

from __future__ import annotations

import os
from pathlib import Path

from perfsuite.facts.config import tomllib
from perfsuite.orchestrate.history.ingest import ingest, parse_file
from perfsuite.orchestrate.history.store import SCHEMA_VERSION, History, HistoryError, open_history

ENV = "PERFSUITE_HISTORY"

__all__ = ["ENV", "SCHEMA_VERSION", "History", "HistoryError", "default_db", "ingest", "open_history", "parse_file",
           "resolve_db"]


def default_db() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "perfsuite" / "history.sqlite"


def _from_pyproject(start: Path) -> Path | None:
    # Read directly: the key is documented in docs/history.md and read only here (the pytest plugin's
    # config.parse validates the rest of [tool.perfsuite]).
    from perfsuite.facts.config import find_pyproject

    pyproject = find_pyproject(start)
    if pyproject is None:
        return None
    try:
        raw = tomllib.loads(pyproject.read_text()).get("tool", {}).get("perfsuite", {})
    except tomllib.TOMLDecodeError as exc:
        raise HistoryError(f"{pyproject}: malformed TOML ({exc}); fix the file") from None
    value = raw.get("history")
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise HistoryError(f"{pyproject}: [tool.perfsuite] history must be a path string, got {value!r}")
    return pyproject.parent / value


def resolve_db(cli: str | os.PathLike[str] | None = None, start: Path | None = None) -> Path:
    """The database path by precedence (see the module docstring). A URL is refused with the reason."""
    for source, value in (("--db", cli), (f"${ENV}", os.environ.get(ENV))):
        if value:
            text = str(value)
            if "://" in text:
                raise HistoryError(f"{source} {text!r}: perfsuite's history is an SQLite file, not a server URL; "
                                   "give a file path (docs/history.md says how teams share one)")
            return Path(text).expanduser()
    return _from_pyproject(start or Path.cwd()) or default_db()
