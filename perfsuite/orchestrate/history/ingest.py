"""Run files -> rows (docs/history.md, "What is in it"). Every file is read and checked before anything is written,
then all go in one transaction. A ``run`` is perfsuite's pytest-benchmark JSON; an ``ab`` is what ``perfsuite ab
--json`` writes (a dict with ``"kind": "ab"`` or a ``verdicts`` list, or a bare list of verdicts), stored as it is.
The same content twice is one run: the key is the SHA-256 of the canonical JSON (sorted keys, no whitespace)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.facts import vocabulary
from perfsuite.orchestrate import baselines
from perfsuite.orchestrate.history.store import History, HistoryError

_FIX = "nothing was changed; fix or drop that file and run the ingest again"


@dataclass
class Result:
    test: str
    cell_id: str
    metric: str
    cell: dict[str, Any]
    samples: dict[str, Any] | None
    measured_by: Any
    points: list[tuple[str, int, float]] = field(default_factory=list)  # (name, process, value)


@dataclass
class Parsed:
    path: Path
    kind: str
    sha256: str
    runner_class: str
    run_time: str
    profile: str | None = None
    commit_id: str | None = None
    commit_time: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    versions: dict[str, str] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    payload: str | None = None
    dropped: Counter[str] = field(default_factory=Counter)  # NaN/inf values left out, by where they were


@dataclass(frozen=True)
class IngestReport:
    added: list[tuple[Path, int]]  # (file, run id)
    duplicates: list[tuple[Path, int]]  # already in the database: (file, its run id)
    dropped: list[tuple[Path, dict[str, int]]] = field(default_factory=list)  # (file, {where: count}) NaN/inf


def _nonfinite(v: Any) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _utc(text: Any, path: Path) -> str:
    if not isinstance(text, str):
        raise HistoryError(f"{path}: no 'datetime' (when the run happened); {_FIX}")
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise HistoryError(f"{path}: 'datetime' {text!r} is not an ISO 8601 time; {_FIX}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.astimezone(dt.timezone.utc).isoformat(timespec="microseconds")


def _measured(values: Mapping[str, Any], dropped: Counter[str], where: str = "") -> dict[str, float]:
    """The finite numeric measurements of ``values`` (vLLM's names); non-finite ones are counted in ``dropped``."""
    keys = [k for k in values if vocabulary.is_measurement(k)]
    for k in keys:
        dropped[where + k] += _nonfinite(values[k])
    return {k: f for k in keys if (f := _num(values[k])) is not None}


def _samples(samples: Mapping[str, Any], dropped: Counter[str], where: str) -> dict[str, list[float]]:
    """The finite numbers of each list of ``samples``; non-finite ones are counted in ``dropped``."""
    out = {}
    for k, vals in samples.items():
        if isinstance(vals, list):
            dropped[where + k] += sum(map(_nonfinite, vals))
            out[k] = [x for x in map(_num, vals) if x is not None]
    return out


def _process_points(processes: Any, dropped: Counter[str]) -> list[tuple[str, int, float]]:
    out: list[tuple[str, int, float]] = []
    for i, proc in enumerate(processes if isinstance(processes, list) else []):
        if not isinstance(proc, Mapping):
            continue
        values = _measured(proc, dropped, "processes[].")
        out += [(k, i, f) for k, f in values.items()]
        samples = proc.get("samples")
        if isinstance(samples, Mapping):
            for k, xs in _samples(samples, dropped, "processes[].samples.").items():
                name = f"median_{k}"
                if xs and name not in values and vocabulary.is_measurement(name):
                    out.append((name, i, statistics.median(xs)))
    return out


def _parse_run(path: Path, data: dict[str, Any], sha: str, runner_class: str | None = None) -> Parsed:
    """``runner_class``: the class asked for; a run recorded under it stays under it, even a pre-tier name."""
    from perfsuite.machine.runner_class import recorded_class

    mi = data.get("machine_info", {})
    meta = mi["perfsuite"]
    recorded = rc = meta.get("runner_class")
    if not isinstance(rc, str) or not rc:
        raise HistoryError(f"{path}: machine_info.perfsuite has no runner_class; {_FIX}")
    if runner_class != rc:  # recorded before classes carried the tier: today's name, as the gate reads it
        rc = recorded_class(mi) or rc
    ci = data.get("commit_info") or {}
    versions = {k[:-len("_version")]: str(v) for k, v in meta.items() if k.endswith("_version") and v}
    if mi.get("python_version"):
        versions["python"] = str(mi["python_version"])
    machine = {k: v for k, v in meta.items() if not k.endswith("_version")}
    if rc != recorded:
        machine["runner_class"], machine["runner_class_recorded"] = rc, recorded
    machine.update({k: mi[k] for k in ("node", "machine", "system", "release") if mi.get(k)})
    if isinstance(mi.get("cpu"), Mapping) and mi["cpu"].get("brand_raw"):
        machine["cpu_brand"] = mi["cpu"]["brand_raw"]
    p = Parsed(path, "run", sha, rc, _utc(data.get("datetime"), path), profile=meta.get("profile"),
               commit_id=ci.get("id"), commit_time=ci.get("time"), branch=ci.get("branch"),
               dirty=ci.get("dirty"), versions=versions, machine=machine)
    for b in data["benchmarks"]:
        info = b.get("extra_info") or {}
        cell: Mapping[str, Any] = info["cell"] if isinstance(info.get("cell"), Mapping) else {}
        cell_id = cell.get("id") or b.get("param")
        if not isinstance(cell_id, str) or not cell_id:
            raise HistoryError(f"{path}: benchmark {b.get('name')!r} names no cell (extra_info.cell.id); {_FIX}")
        other = info.get("runner_class")
        if other not in (None, rc, recorded):
            raise HistoryError(f"{path}: benchmark {b.get('name')!r} is of runner class {other!r}, the file of "
                               f"{rc!r}; a run file holds one runner class; {_FIX}")
        r = Result(str(b.get("name") or b["fullname"]), cell_id, str(info.get("metric") or b.get("group") or ""),
                   dict(cell), info.get("samples") if isinstance(info.get("samples"), Mapping) else None,
                   info.get("measured_by"))
        r.points = [(k, -1, f) for k, f in _measured(info, p.dropped).items()]
        _samples(r.samples or {}, p.dropped, "samples.")  # counts their non-finite values only
        r.points += _process_points(info.get("processes"), p.dropped)
        p.results.append(r)
    return p


def _parse_ab(path: Path, data: Any, sha: str, runner_class: str | None) -> Parsed:
    doc = data if isinstance(data, Mapping) else {"verdicts": data}
    verdicts = doc.get("verdicts") or doc.get("results") or []
    if not isinstance(verdicts, list) or not all(isinstance(v, Mapping) for v in verdicts):
        raise HistoryError(f"{path}: an A/B result whose 'verdicts' is not a list of objects; {_FIX}")
    meta = (doc.get("machine_info") or {}).get("perfsuite") or {}
    rc = doc.get("runner_class") or meta.get("runner_class") or runner_class
    if not isinstance(rc, str) or not rc:
        raise HistoryError(f"{path}: an A/B result that names no runner class; pass --runner-class (the machine "
                           "it ran on)")
    b: Mapping[str, Any] = doc["b"] if isinstance(doc.get("b"), Mapping) else {}
    when = doc.get("datetime") or doc.get("finished") or doc.get("started")
    mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
    run_time = _utc(when, path) if when else mtime.isoformat(timespec="microseconds")
    return Parsed(path, "ab", sha, rc, run_time, profile=doc.get("profile"),
                  commit_id=b.get("commit") or doc.get("commit"), verdicts=[dict(v) for v in verdicts],
                  payload=json.dumps(doc, sort_keys=True))


def parse_file(path: Path, runner_class: str | None = None, *, fallback_runner_class: str | None = None) -> Parsed:
    """Read and check one file; raises :class:`HistoryError` naming it. ``runner_class`` is asserted if given;
    ``fallback_runner_class`` names an A/B result that names none (a report needs no class; a history does)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read ({exc.strerror}); {_FIX}") from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path}: corrupt (not valid JSON: {exc}); {_FIX}") from None
    sha = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()  # canonical
    if isinstance(data, Mapping) and isinstance(data.get("benchmarks"), list):
        try:
            baselines.read_run(path)  # the same checks as a baseline: perfsuite's schema, not newer, well formed
        except baselines.BaselineError as exc:
            raise HistoryError(f"{exc} ({_FIX})") from None
        parsed = _parse_run(path, dict(data), sha, runner_class)
    elif (isinstance(data, Mapping) and (data.get("kind") == "ab" or "verdicts" in data)) or (
            isinstance(data, list) and data and all(isinstance(v, Mapping) and "metric" in v for v in data)):
        parsed = _parse_ab(path, data, sha, runner_class or fallback_runner_class)
    else:
        raise HistoryError(f"{path}: neither a perfsuite pytest-benchmark run (no 'benchmarks' list) nor a "
                           f"`perfsuite ab --json` result; {_FIX}")
    if runner_class is not None and parsed.runner_class != runner_class:
        raise HistoryError(f"{path}: runner class {parsed.runner_class!r}, but this history is for "
                           f"{runner_class!r}; series of different machines never mix: ingest it into that "
                           "class's database (or drop --runner-class to keep several classes in one)")
    return parsed


def _dumps(v: Any) -> str | None:
    return None if v is None else json.dumps(v, sort_keys=True, default=str)


def _id(conn: Any, table: str, cols: tuple[str, ...], key: tuple[Any, ...], extra: dict[str, Any] | None = None) -> int:
    """The id of the row with ``cols == key`` in ``table``, inserted (with ``extra`` columns) if missing."""
    where = " AND ".join(f"{c} = ?" for c in cols)
    row = conn.execute(f"SELECT id FROM {table} WHERE {where}", key).fetchone()
    if row:
        return int(row[0])
    names = (*cols, *(extra or {}))
    cur = conn.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                       (*key, *(extra or {}).values()))
    return int(cur.lastrowid or 0)


def _per_generation(samples: Mapping[str, Any] | None) -> dict[str, list[float]] | None:
    """The samples worth keeping: per generation (TTFT, TPOT, E2E), 6 significant digits. Per-decode-step ITL
    lists are hundreds of values a run; their aggregates (mean/median/p90/p99_itl_ms) are points already."""
    if not samples:
        return None
    out = {k: [float(f"{x:.6g}") for x in v if _num(x) is not None] for k, v in samples.items()
           if k != "itl_ms" and isinstance(v, list)}
    return out or None


def ingest(db: History, paths: Sequence[Path], *, runner_class: str | None = None) -> IngestReport:
    """Add the runs in ``paths`` (all or nothing). A database pinned to a runner class refuses any other."""
    pinned = db.meta("runner_class")
    if pinned and runner_class and pinned != runner_class:
        raise HistoryError(f"{db.path}: this history is pinned to runner class {pinned!r}, not {runner_class!r}; "
                           "use that class's database")
    want = runner_class or pinned
    parsed = [parse_file(Path(p), want) for p in paths]
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    added: list[tuple[Path, int]] = []
    dups: list[tuple[Path, int]] = []
    series_ids: dict[tuple[str, str, str, str], int] = {}
    with db.write() as conn:
        if runner_class and not pinned and not conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone():
            conn.execute("INSERT INTO meta (key, value) VALUES ('runner_class', ?)", (runner_class,))
        for p in parsed:
            row = conn.execute("SELECT id FROM runs WHERE sha256 = ?", (p.sha256,)).fetchone()
            if row:
                dups.append((p.path, int(row[0])))
                continue
            cur = conn.execute(
                "INSERT INTO runs (sha256, kind, runner_class, profile, commit_id, commit_time, branch, dirty, "
                "run_time, versions, machine, source, ingested_at, payload) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (p.sha256, p.kind, p.runner_class, p.profile, p.commit_id, p.commit_time, p.branch,
                 None if p.dirty is None else int(bool(p.dirty)), p.run_time, _dumps(p.versions),
                 _dumps(p.machine), str(p.path), now, p.payload))
            run_id = int(cur.lastrowid or 0)
            epoch = dt.datetime.fromisoformat(p.run_time).timestamp()
            for r in p.results:
                cell_ref = _id(conn, "cells", ("cell_id",), (r.cell_id,), {"cell": _dumps(r.cell)})
                rc = conn.execute(
                    "INSERT INTO results (run_id, test, cell, metric, samples, measured_by) VALUES (?,?,?,?,?,?)",
                    (run_id, r.test, cell_ref, r.metric, _dumps(_per_generation(r.samples)), _dumps(r.measured_by)))
                rid = int(rc.lastrowid or 0)
                rows = []
                for name, proc, value in r.points:
                    key = (p.runner_class, r.cell_id, r.metric, name)
                    sid = series_ids.get(key)
                    if sid is None:
                        sid = series_ids[key] = _id(conn, "series", ("runner_class", "cell_id", "metric", "name"), key)
                    rows.append((sid, run_id, rid, proc, value, epoch))
                conn.executemany("INSERT INTO points (series, run_id, result_id, process, value, run_time) "
                                 "VALUES (?,?,?,?,?,?)", rows)
            for i, v in enumerate(p.verdicts):
                ratio = _num(v.get("ratio"))
                conn.execute("INSERT INTO ab_verdicts (run_id, position, test, metric, verdict, ratio, payload) "
                             "VALUES (?,?,?,?,?,?,?)",
                             (run_id, i, v.get("test") or v.get("cell"), v.get("metric"),
                              v.get("kind") or v.get("verdict"), ratio, _dumps(v)))
            added.append((p.path, run_id))
    new = {path for path, _ in added}
    dropped = [(p.path, {k: n for k, n in p.dropped.items() if n}) for p in parsed if +p.dropped and p.path in new]
    return IngestReport(added, dups, dropped)
