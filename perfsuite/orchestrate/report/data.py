"""What a report shows, gathered once: the history's series and change points, the latest runs, A/B verdicts and
the operator coverage matrix (with its changes). Rendering lives in markdown.py and html.py."""

from __future__ import annotations

import datetime as dt
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.facts.errors import UsageError, reraise_as
from perfsuite.facts.vocabulary import DECODE_THROUGHPUT, OUTPUT_THROUGHPUT, num_cell, pct
from perfsuite.orchestrate.history import History, HistoryError, parse_file, query
from perfsuite.orchestrate.history.ingest import Parsed, Result
from perfsuite.verdict import changepoint as cpd


@dataclass
class SeriesView:
    key: query.SeriesKey
    points: list[query.Point]
    findings: list[query.Finding]


@dataclass
class ReportData:
    title: str
    generated_at: str
    db_path: str | None
    runs_in_db: int = 0
    series: list[SeriesView] = field(default_factory=list)
    findings: list[query.Finding] = field(default_factory=list)
    new_within: int = 3
    notes: list[str] = field(default_factory=list)
    latest: list[dict[str, Any]] = field(default_factory=list)  # one row per (runner class, cell)
    ab: list[dict[str, Any]] = field(default_factory=list)
    ab_sources: list[str] = field(default_factory=list)
    ops: dict[str, Any] | None = None
    ops_delta: list[dict[str, Any]] = field(default_factory=list)
    serving: dict[str, list[dict[str, float]]] = field(default_factory=dict)  # serving_plot's curves

    @property
    def new_findings(self) -> list[query.Finding]:
        return [f for f in self.findings if f.since <= self.new_within]

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "generated_at": self.generated_at, "db": self.db_path,
                "runs_in_db": self.runs_in_db, "new_within": self.new_within,
                "change_points": [f.as_dict() for f in self.findings], "notes": self.notes, "latest": self.latest,
                "ab": [{k: v for k, v in a.items() if k != "doc"} for a in self.ab], "ops_delta": self.ops_delta}


def _latest_rows(parsed: list[Parsed], db: History | None, baseline_points: int = 10) -> list[dict[str, Any]]:
    """Per cell of the latest runs: headline values, efficiency, and the change against the history's median."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for p in parsed:
        for r in p.results:
            row = rows.setdefault((p.runner_class, r.cell_id), {"runner_class": p.runner_class, "cell_id": r.cell_id,
                                                                "commit": p.commit_id, "run_time": p.run_time})
            vals = {n: v for n, proc, v in r.points if proc == -1}
            want = query.PRIMARY.get(r.metric)
            if want in vals:
                row[want] = vals[want]
                if db is not None:
                    key = query.SeriesKey(p.runner_class, r.cell_id, r.metric, want)
                    hist = [pt.value for pt in query.points(db, key) if pt.run_time < p.run_time][-baseline_points:]
                    ref = statistics.median(hist) if hist else None
                    if ref:
                        row[f"delta_{want}"] = vals[want] / ref - 1
                        row[f"history_points_{want}"] = len(hist)
            # each throughput under its own name: end to end from test_e2el, decode only from test_tpot (which
            # stored it as output throughput before 2026-12-01)
            if r.metric == "e2el" and OUTPUT_THROUGHPUT in vals:
                row[OUTPUT_THROUGHPUT] = vals[OUTPUT_THROUGHPUT]
            elif r.metric == "tpot" and (DECODE_THROUGHPUT in vals or OUTPUT_THROUGHPUT in vals):
                row[DECODE_THROUGHPUT] = vals.get(DECODE_THROUGHPUT, vals.get(OUTPUT_THROUGHPUT))
            mem = max((v for n, v in vals.items() if n.startswith("peak_") and n != "peak_reserved_bytes"),
                      default=None)
            if mem is not None:
                row["peak_bytes"] = max(row.get("peak_bytes", 0), mem)
    for row in rows.values():
        # the tables' one tokens/s column: end to end where the run has it, else decode only, and it says which
        kind, tps = (("end to end", row[OUTPUT_THROUGHPUT]) if OUTPUT_THROUGHPUT in row else
                     ("decode", row[DECODE_THROUGHPUT]) if DECODE_THROUGHPUT in row else ("", None))
        if tps is not None:
            row["tokens_per_s"], row["tokens_per_s_kind"] = tps, kind
        mem = row.get("peak_bytes")
        if tps and mem:
            row["tokens_per_s_per_gib"] = tps / (mem / 2**30)
    return sorted(rows.values(), key=lambda r: (r["runner_class"], r["cell_id"]))


def _newest_runs(db: History) -> list[Parsed]:
    """Without --run: the newest run of each runner class in the database, rebuilt from its rows."""
    out = []
    for rc in [r[0] for r in db.query("SELECT DISTINCT runner_class FROM runs WHERE kind = 'run'")]:
        run = db.query("SELECT * FROM runs WHERE kind = 'run' AND runner_class = ? ORDER BY run_time DESC, id DESC "
                       "LIMIT 1", (rc,))[0]
        p = Parsed(Path(run["source"] or "?"), "run", run["sha256"], rc, run["run_time"], commit_id=run["commit_id"])
        for res in db.query("SELECT s.*, c.cell_id FROM results s JOIN cells c ON c.id = s.cell WHERE s.run_id = ?",
                            (run["id"],)):
            r = Result(res["test"], res["cell_id"], res["metric"], {}, None, None)
            r.points = [(row["name"], row["process"], row["value"]) for row in db.query(
                "SELECT s.name, p.process, p.value FROM points p JOIN series s ON s.id = p.series "
                "WHERE p.result_id = ?", (res["id"],))]
            p.results.append(r)
        out.append(p)
    return out


def _ab_from_files(paths: list[Path]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such A/B result file")
        p = parse_file(path, fallback_runner_class="?")
        if p.kind != "ab":
            raise UsageError(f"{path}: a benchmark run, not an A/B result; pass it with --run")
        doc = json.loads(p.payload or "{}")
        out += [{"test": v.get("test") or v.get("cell"), "metric": v.get("metric"),
                 "verdict": v.get("kind") or v.get("verdict"), "ratio": v.get("ratio"), "payload": v,
                 "commit_id": p.commit_id, "run_time": p.run_time, "doc": doc} for v in p.verdicts]
    return out


def _ops_delta(cur: dict[str, Any], prev: dict[str, Any] | None) -> list[dict[str, Any]]:
    """New/fixed gaps against the known-gaps file, and cells whose status changed against a previous matrix."""
    gaps = cur.get("gaps") or {}
    out = [{"change": f"{kind} gap", "op": g.get("op") or g.get("gap"), "shape_class": g.get("shape_class"),
            "backend": g.get("backend"), "dtype": g.get("dtype"), "status": g.get("worst", "pass"),
            "detail": str(g.get("detail", ""))[:200]} for kind in ("new", "fixed") for g in gaps.get(kind) or []]
    if prev is not None:
        def index(m: dict[str, Any]) -> dict[tuple[str, str, str, str], str]:
            return {(c["op"], c["shape_class"], c["backend"], c["dtype"]): c["worst"] for c in m.get("cells", [])}

        a, b = index(prev), index(cur)
        for k in sorted(set(a) | set(b)):
            before, after = a.get(k), b.get(k)
            if before != after and {before, after} != {None, "pass"}:  # a cell added or dropped passing: no news
                out.append({"change": f"{a.get(k, 'absent')} -> {b.get(k, 'absent')}", "op": k[0],
                            "shape_class": k[1], "backend": k[2], "dtype": k[3], "status": b.get(k, "absent"),
                            "detail": ""})
    return out


def _load_ops(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not an ops-matrix.json ({exc}); pass the file `perfsuite ops --out` wrote") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise UsageError(f"{path}: not an ops-matrix.json (no 'cells' list); pass the file `perfsuite ops` wrote")
    return data


def collect(db: History | None, *, runs: list[Path], ab: list[Path], ops: Path | None, ops_previous: Path | None,
            title: str, new_within: int = 3, max_series: int = 60, detect: dict[str, Any] | None = None) -> ReportData:
    data = ReportData(title, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                      str(db.path) if db else None, new_within=new_within)
    parsed: list[Parsed] = []
    for path in runs:
        with reraise_as(UsageError, HistoryError):
            p = parse_file(path)
        if p.kind != "run":
            raise UsageError(f"{path}: an A/B result, not a benchmark run; pass it with --ab")
        parsed.append(p)
    if db is not None:
        data.runs_in_db = int(db.query("SELECT count(*) FROM runs")[0][0])
        d = {"max_pvalue": cpd.DEFAULT_MAX_PVALUE, "permutations": cpd.DEFAULT_PERMUTATIONS,
             "min_size": cpd.DEFAULT_MIN_SIZE, "window": 200, **(detect or {})}
        data.findings, data.notes = query.analyse(db, **d)
        by_key: dict[query.SeriesKey, list[query.Finding]] = {}
        for f in data.findings:
            by_key.setdefault(f.key, []).append(f)
        keys = query.primary_keys(db)
        # series with a change first (newest change first), then the rest, up to max_series plots
        keys.sort(key=lambda k: (k not in by_key, -max((-f.since for f in by_key.get(k, [])), default=0), k))
        data.series = [SeriesView(k, query.points(db, k, last=d["window"]), by_key.get(k, []))
                       for k in keys[:max_series]]
        if len(keys) > max_series:
            data.notes.append(f"{len(keys) - max_series} more series not plotted (--max-plots {max_series})")
        if not parsed:
            parsed = _newest_runs(db)
        if not ab:
            data.ab = query.ab_verdicts(db, last_runs=1)
            data.ab_sources = ["newest A/B result in the history"] if data.ab else []
    from perfsuite.orchestrate.report.serving_plot import load_files

    data.serving = load_files([p.path for p in parsed])
    data.latest = _latest_rows(parsed, db)
    if ab:
        data.ab = _ab_from_files(ab)
        data.ab_sources = [str(p) for p in ab]
    data.ops = _load_ops(ops)
    if data.ops is not None:
        data.ops_delta = _ops_delta(data.ops, _load_ops(ops_previous))
    return data


# ----------------------------------------------------------------------------------- cells of both renderings
def pct_cell(v: Any) -> str:
    return pct(v, missing="—")


def tokens_per_s(row: dict[str, Any], key: str = "tokens_per_s") -> str:
    """A latest-run row's tokens/s (or ``tokens_per_s_per_gib``), marked ``(decode)`` when the run had no end-to-end
    throughput and the figure counts decode steps only."""
    text = num_cell(row.get(key), ".0f")
    return f"{text} (decode)" if row.get("tokens_per_s_kind") == "decode" and key in row else text


def latest_cells(row: dict[str, Any]) -> list[str]:
    """A latest-run row's values, the columns both tables show after the runner class and the cell."""
    mem = row.get("peak_bytes")
    return [num_cell(row.get("median_ttft_ms")), pct_cell(row.get("delta_median_ttft_ms")),
            num_cell(row.get("median_tpot_ms")), pct_cell(row.get("delta_median_tpot_ms")), tokens_per_s(row),
            num_cell(mem / 2**20 if mem else None, ".0f"), tokens_per_s(row, "tokens_per_s_per_gib")]
