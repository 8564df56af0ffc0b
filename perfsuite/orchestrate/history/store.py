"""The history database: one SQLite file (stdlib ``sqlite3``; docs/history.md, "Guarantees"). A file is ours when its
``PRAGMA application_id`` is :data:`APPLICATION_ID`; its schema version is ``PRAGMA user_version``. Every write is
one ``BEGIN IMMEDIATE`` transaction; the journal stays in rollback mode (no ``-wal`` side files): one file to copy."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from perfsuite.facts.errors import UsageError

APPLICATION_ID = 0x50665348  # "PfSH": perfsuite history
SQLITE_MAGIC = b"SQLite format 3\x00"

# MIGRATIONS[v] takes a database of schema v - 1 to schema v. Append; never edit a released step.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            sha256 TEXT NOT NULL UNIQUE,        -- of the file's canonical JSON: the same run twice is one run
            kind TEXT NOT NULL,                 -- 'run' (pytest-benchmark JSON) | 'ab' (perfsuite ab --json)
            runner_class TEXT NOT NULL,
            profile TEXT,
            commit_id TEXT,
            commit_time TEXT,
            branch TEXT,
            dirty INTEGER,
            run_time TEXT NOT NULL,             -- ISO 8601, UTC: the JSON's datetime
            versions TEXT NOT NULL,             -- JSON {distribution: version}
            machine TEXT NOT NULL,              -- JSON machine facts (machine_info.perfsuite, CPU, Python)
            source TEXT,
            ingested_at TEXT NOT NULL)""",
        """CREATE TABLE cells (
            id INTEGER PRIMARY KEY,
            cell_id TEXT NOT NULL UNIQUE,       -- e.g. torch-tiny-llama-float32-b1-p64-n32
            cell TEXT NOT NULL)                 -- JSON Cell.as_dict() as first seen""",
        """CREATE TABLE results (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            test TEXT NOT NULL,                 -- pytest-benchmark name, e.g. test_tpot[<cell id>]
            cell INTEGER NOT NULL REFERENCES cells(id),
            metric TEXT NOT NULL,               -- the test's metric: ttft | tpot | e2el
            samples TEXT,                       -- JSON {name: [values]}: the per-generation samples
            measured_by TEXT,                   -- JSON, when the run says how it was measured
            UNIQUE (run_id, test))""",
        """CREATE TABLE series (
            id INTEGER PRIMARY KEY,
            runner_class TEXT NOT NULL,
            cell_id TEXT NOT NULL,
            metric TEXT NOT NULL,
            name TEXT NOT NULL,                 -- vLLM's name: median_tpot_ms, output_throughput_tokens_per_s, ...
            UNIQUE (runner_class, cell_id, metric, name))""",
        """CREATE TABLE points (
            series INTEGER NOT NULL REFERENCES series(id),
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
            process INTEGER NOT NULL,           -- -1: the run's aggregate; i >= 0: worker process i
            value REAL NOT NULL,
            run_time REAL NOT NULL)             -- the run's time, Unix seconds (orders a series)""",
        """CREATE INDEX points_series ON points (series, process, run_time)""",
        """CREATE INDEX points_result ON points (result_id)""",
    ),
    2: (
        """CREATE TABLE ab_verdicts (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            test TEXT,
            metric TEXT,
            verdict TEXT,
            ratio REAL,
            payload TEXT NOT NULL,              -- the verdict as the A/B wrote it (JSON)
            PRIMARY KEY (run_id, position))""",
        """ALTER TABLE runs ADD COLUMN payload TEXT""",  # JSON of small documents (A/B results)
        """CREATE INDEX runs_commit ON runs (runner_class, commit_id)""",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)


class HistoryError(UsageError):
    """A database or input file that cannot be used; one line naming the file and the fix. Nothing was changed."""


def _is_sqlite(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(16) == SQLITE_MAGIC


def _explain(path: Path, exc: sqlite3.Error) -> HistoryError:
    text = str(exc)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return HistoryError(f"{path}: database is locked by another process ({text}); nothing was changed. Retry "
                            "when the other `perfsuite history` finishes, or raise --lock-timeout")
    if "readonly" in low or "read-only" in low or "unable to open" in low:
        return HistoryError(f"{path}: cannot write ({text}); nothing was changed. Check the file's and its "
                            "folder's permissions, or pass a writable --db")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return HistoryError(f"{path}: corrupt SQLite file ({text}); nothing was changed. Restore it from its "
                            "backup/artifact, or rebuild it with `perfsuite history ingest` from the run JSON files")
    return HistoryError(f"{path}: SQLite error: {text}; nothing was changed")


class History(AbstractContextManager["History"]):
    """An open history database. Use :func:`open_history`; close with :meth:`close` or ``with``."""

    def __init__(self, path: Path, conn: sqlite3.Connection, readonly: bool) -> None:
        self.path = path
        self.conn = conn
        self.readonly = readonly

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One transaction: everything inside commits together, or (on any exception) nothing does."""
        if self.readonly:
            raise HistoryError(f"{self.path}: opened read-only")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _explain(self.path, exc) from None
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self.conn.execute("ROLLBACK")
            raise _explain(self.path, exc) from None
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise _explain(self.path, exc) from None

    def meta(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None


def _version(conn: sqlite3.Connection) -> tuple[int, int, int]:
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    ver = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    return app, ver, tables


def open_history(path: Path | str, *, readonly: bool = False, create: bool = True,
                 lock_timeout_s: float = 10.0) -> History:
    """Open (and for writing: create or migrate) the history database at ``path``."""
    path = Path(path)
    exists = path.exists()
    if exists and path.is_dir():
        raise HistoryError(f"{path}: is a directory; pass the database file, e.g. --db {path}/history.sqlite")
    if not exists and (readonly or not create):
        raise HistoryError(f"{path}: no history database here; create one with `perfsuite history ingest --db "
                           f"{path} RUN.json`")
    if exists and path.stat().st_size and not _is_sqlite(path):
        raise HistoryError(f"{path}: not an SQLite database (corrupt, or another kind of file); nothing was changed. "
                           "Restore it from its backup/artifact or pass another --db")
    if not exists:
        path.parent.mkdir(parents=True, exist_ok=True)
    uri = f"{path.resolve().as_uri()}?mode={'ro' if readonly else 'rwc'}"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=lock_timeout_s, isolation_level=None)
    except sqlite3.Error as exc:
        raise _explain(path, exc) from None
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        app, ver, tables = _version(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise _explain(path, exc) from None
    db = History(path, conn, readonly)
    try:
        if app != APPLICATION_ID:
            if tables or app:
                raise HistoryError(f"{path}: an SQLite database, but not a perfsuite history (application_id "
                                   f"{app:#x}); nothing was changed. Pass another --db")
            if readonly:
                raise HistoryError(f"{path}: empty database; ingest a run first")
        if ver > SCHEMA_VERSION:
            raise HistoryError(f"{path}: history schema {ver} is newer than this perfsuite ({SCHEMA_VERSION}); "
                               "nothing was changed. Upgrade perfsuite to read it")
        if ver < SCHEMA_VERSION:
            if readonly:
                raise HistoryError(f"{path}: history schema {ver} is older than this perfsuite ({SCHEMA_VERSION}); "
                                   f"migrate it first: perfsuite history migrate --db {path}")
            migrate(db, ver)
    except BaseException:
        conn.close()
        raise
    return db


def migrate(db: History, current: int, target: int = SCHEMA_VERSION) -> list[int]:
    """Apply the migration steps after ``current`` up to ``target`` in one transaction; returns the steps applied."""
    with db.write() as conn:
        # Re-read under the write lock: another process may have migrated meanwhile.
        _, ver, _ = _version(conn)
        steps = [v for v in sorted(MIGRATIONS) if max(ver, current) < v <= target]
        for v in steps:
            for sql in MIGRATIONS[v]:
                conn.execute(sql)
        if steps:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {steps[-1]}")
    return steps
