"""Reading the history: series, their points in time order, runs, and the change points of each series."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.facts import vocabulary
from perfsuite.orchestrate.history.store import History
from perfsuite.verdict import changepoint as cpd

_SERIES = "SELECT id FROM series WHERE runner_class = ? AND cell_id = ? AND metric = ? AND name = ?"

# The series that change-point detection watches by default: each test's own headline metric.
PRIMARY = {base: f"median_{base}_ms" for base in vocabulary.TIMED}


@dataclass(frozen=True, order=True)
class SeriesKey:
    runner_class: str
    cell_id: str
    metric: str  # the test: ttft | tpot | e2el
    name: str  # vLLM's name of the value, e.g. median_tpot_ms

    def label(self) -> str:
        return f"{self.cell_id} {self.metric}:{self.name}"

    @property
    def higher_is_better(self) -> bool:
        return self.name.endswith("_per_s")


@dataclass(frozen=True)
class Point:
    run_id: int
    run_time: str
    commit_id: str | None
    value: float


@dataclass(frozen=True)
class Finding:
    """One change point of one series, named by commits and with the A/B that confirms it."""

    key: SeriesKey
    change: cpd.ChangePoint
    points: int  # length of the analysed series
    before: Point  # last point of the old segment
    after: Point  # first point of the new segment
    profile: str | None
    device: str | None
    backend: str | None
    model: str | None

    @property
    def since(self) -> int:
        """Points at and after the change: 3 means the change showed up three nightlies ago."""
        return self.points - self.change.index

    @property
    def kind(self) -> str:
        worse = self.change.ratio > 1 if not self.key.higher_is_better else self.change.ratio < 1
        return "regression" if worse else "improvement"

    def commit_range(self) -> str:
        return f"{(self.before.commit_id or '?')[:10]}..{(self.after.commit_id or '?')[:10]}"

    def ab_commands(self, budget: str = "5m") -> list[str]:
        """Shell lines that confirm (or refute) the change by a two-tree A/B of its two commits."""
        a, b = self.before.commit_id, self.after.commit_id
        if not a or not b:
            return []
        args = ["--cells", self.key.cell_id]
        for flag, value in (("--profile", self.profile), ("--device", self.device), ("--backend", self.backend),
                            ("--model", self.model)):
            if value:
                args += [flag, str(value)]
        return [f"git worktree add ../cp-a {a} && git worktree add ../cp-b {b}",
                f"perfsuite ab --a ../cp-a --b ../cp-b --budget {budget} {shlex.join(args)}"]

    def as_dict(self) -> dict[str, Any]:
        c = self.change
        return {"runner_class": self.key.runner_class, "cell_id": self.key.cell_id, "metric": self.key.metric,
                "name": self.key.name, "kind": self.kind, "index": c.index, "points": self.points,
                "since": self.since, "p_value": c.p_value, "ratio": c.ratio, "change": c.change,
                "median_before": c.before, "median_after": c.after,
                "commit_before": self.before.commit_id, "commit_after": self.after.commit_id,
                "time_before": self.before.run_time, "time_after": self.after.run_time,
                "ab_commands": self.ab_commands()}


def series_keys(db: History, *, runner_class: str | None = None, cell: str | None = None,
                metric: str | None = None, names: Sequence[str] | None = None) -> list[SeriesKey]:
    sql = "SELECT runner_class, cell_id, metric, name FROM series WHERE 1"
    params: list[Any] = []
    for col, val in (("runner_class", runner_class), ("cell_id", cell), ("metric", metric)):
        if val:
            sql += f" AND {col} = ?"
            params.append(val)
    if names:
        sql += f" AND name IN ({','.join('?' * len(names))})"
        params += list(names)
    return sorted(SeriesKey(*r) for r in db.query(sql, tuple(params)))


def primary_keys(db: History, **filters: Any) -> list[SeriesKey]:
    return [k for k in series_keys(db, **filters) if PRIMARY.get(k.metric) == k.name]


def points(db: History, key: SeriesKey, *, last: int | None = None) -> list[Point]:
    """The run-level values of one series, oldest first (by the run's time, then ingest order)."""
    sql = ("SELECT p.run_id, r.run_time, r.commit_id, p.value FROM points p JOIN runs r ON r.id = p.run_id "
           f"WHERE p.series = ({_SERIES}) AND p.process = -1 ORDER BY p.run_time DESC, p.run_id DESC")
    params: tuple[Any, ...] = (key.runner_class, key.cell_id, key.metric, key.name)
    if last:
        sql += " LIMIT ?"
        params += (int(last),)
    return [Point(int(r[0]), r[1], r[2], float(r[3])) for r in reversed(db.query(sql, params))]


def stored_process_values(db: History, key: SeriesKey, run_id: int) -> list[float]:
    rows = db.query(f"SELECT value FROM points WHERE run_id = ? AND series = ({_SERIES}) AND process >= 0 "
                    "ORDER BY process", (run_id, key.runner_class, key.cell_id, key.metric, key.name))
    return [float(r[0]) for r in rows]


def find_changes(db: History, key: SeriesKey, *, window: int | None = 200, **detect: Any) -> list[Finding]:
    """Change points of one series (its last ``window`` points). Raises ``changepoint.SeriesTooShort``."""
    pts = points(db, key, last=window)
    cps = cpd.e_divisive([p.value for p in pts], **detect)
    rows = db.query("SELECT r.profile, c.cell FROM runs r JOIN results s ON s.run_id = r.id JOIN cells c ON c.id = "
                    "s.cell WHERE r.id = ? AND c.cell_id = ? LIMIT 1", (pts[-1].run_id, key.cell_id)) if pts else []
    profile, cell = (rows[0][0], json.loads(rows[0][1] or "{}")) if rows else (None, {})
    return [Finding(key, c, len(pts), pts[c.index - 1], pts[c.index], profile, cell.get("device"),
                    cell.get("backend"), cell.get("model")) for c in cps]


def analyse(db: History, *, runner_class: str | None = None, cell: str | None = None, metric: str | None = None,
            names: Sequence[str] | None = None, window: int | None = 200, new_within: int | None = None,
            min_change: float = 0.0, **detect: Any) -> tuple[list[Finding], list[str]]:
    """(findings, notes) over the selected series (default: each test's headline metric). A series too short
    for detection becomes a note that says how many points it needs."""
    filters = {"runner_class": runner_class, "cell": cell, "metric": metric}
    keys = series_keys(db, names=names, **filters) if names else primary_keys(db, **filters)
    findings: list[Finding] = []
    notes: list[str] = []
    for key in keys:
        try:
            found = find_changes(db, key, window=window, **detect)
        except cpd.SeriesTooShort as exc:
            notes.append(f"{key.runner_class} {key.label()}: too short for detection: {exc}")
            continue
        findings += [f for f in found if (new_within is None or f.since <= new_within)
                     and abs(f.change.change) >= min_change]
    return findings, notes


def runs(db: History, *, runner_class: str | None = None, last: int | None = None) -> list[dict[str, Any]]:
    sql = ("SELECT r.id, r.kind, r.runner_class, r.profile, r.commit_id, r.run_time, r.source, "
           "(SELECT count(*) FROM results s WHERE s.run_id = r.id) AS results, "
           "(SELECT count(*) FROM ab_verdicts v WHERE v.run_id = r.id) AS verdicts FROM runs r")
    sql += " WHERE r.runner_class = ?" if runner_class else ""
    sql += " ORDER BY r.run_time DESC, r.id DESC"
    if last:
        sql += f" LIMIT {int(last)}"
    return [dict(r) for r in reversed(db.query(sql, (runner_class,) if runner_class else ()))]


def ab_verdicts(db: History, *, last_runs: int = 1) -> list[dict[str, Any]]:
    """The verdicts of the newest ``last_runs`` A/B results, with the run they came from."""
    rows = db.query("SELECT v.*, r.run_time, r.commit_id, r.payload AS doc FROM ab_verdicts v JOIN runs r ON "
                    "r.id = v.run_id WHERE r.id IN (SELECT id FROM runs WHERE kind = 'ab' ORDER BY run_time DESC, "
                    "id DESC LIMIT ?) ORDER BY r.run_time DESC, r.id DESC, v.position", (last_runs,))
    return [{**dict(r), "payload": json.loads(r["payload"]), "doc": json.loads(r["doc"]) if r["doc"] else {}}
            for r in rows]


def export_rows(db: History, *, runner_class: str | None = None) -> list[dict[str, Any]]:
    """Every point with its run's facts: one flat row each (for CSV / JSON lines)."""
    sql = ("SELECT s.runner_class, s.cell_id, s.metric, s.name, p.process, p.value, r.run_time, r.commit_id, "
           "r.profile, r.kind, r.sha256, r.versions FROM points p JOIN runs r ON r.id = p.run_id "
           "JOIN series s ON s.id = p.series")
    sql += " WHERE s.runner_class = ?" if runner_class else ""
    sql += " ORDER BY s.runner_class, s.cell_id, s.metric, s.name, p.run_time, p.run_id, p.process"
    return [dict(r) for r in db.query(sql, (runner_class,) if runner_class else ())]
