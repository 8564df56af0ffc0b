"""Ingest and query times of the history database at N runs (default 10 000).

The runs are made from a real run file's structure (tests/history/data, a smoke run of this VM: 9 benchmarks,
3 cells, ~90 KB): each copy gets its own commit, date and values (latencies scaled by a random factor), is
written to disk in batches and ingested through `perfsuite history ingest` (one transaction per batch), as a
team backfilling a year of baselines would. Then the queries the commands and the report make are timed.

  python benchmarks/history_timing.py --runs 10000 --batch 500 --out /tmp/history-timing
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfsuite.cli import main as cli  # noqa: E402
from perfsuite.orchestrate import history  # noqa: E402
from perfsuite.orchestrate.history import query  # noqa: E402

TEMPLATE = ROOT / "tests" / "history" / "data" / "run_cpu-intel-xeon-2c_smoke.json"


def make_run(template: dict, i: int, rng: random.Random) -> dict:
    d = copy.deepcopy(template)
    d["commit_info"]["id"] = f"{i:040x}"
    d["datetime"] = (dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=i)).isoformat()
    for b in d["benchmarks"]:
        f = math.exp(rng.gauss(0, 0.03))
        info = b["extra_info"]
        for k, v in list(info.items()):
            if k.endswith("_ms") and isinstance(v, float):
                info[k] = v * f
        for k, vals in (info.get("samples") or {}).items():
            info["samples"][k] = [v * f for v in vals]
    return d


def timed(label: str, fn, results: dict) -> object:
    t0 = time.perf_counter()
    out = fn()
    results[label] = time.perf_counter() - t0
    print(f"{label:58s} {results[label]:9.3f} s", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--out", type=Path, default=None, help="folder for the database and the report")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="history-timing-"))
    out.mkdir(parents=True, exist_ok=True)
    db_path = out / "history.sqlite"
    db_path.unlink(missing_ok=True)
    template = json.loads(TEMPLATE.read_text())
    rng = random.Random(0)
    res: dict[str, float] = {}
    ingest_s, write_s = 0.0, 0.0
    staging = out / "staging"
    for start in range(0, args.runs, args.batch):
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        t0 = time.perf_counter()
        files = []
        for i in range(start, min(start + args.batch, args.runs)):
            p = staging / f"run{i:05d}.json"
            p.write_text(json.dumps(make_run(template, i, rng)))
            files.append(str(p))
        write_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        with history.open_history(db_path) as db:
            history.ingest(db, [Path(f) for f in files])
        ingest_s += time.perf_counter() - t0
        print(f"  {start + len(files)} runs ingested ({ingest_s:.1f} s so far)", flush=True)
    res["ingest (all batches)"] = ingest_s
    print(f"{'ingest ' + str(args.runs) + ' runs in batches of ' + str(args.batch):58s} {ingest_s:9.3f} s "
          f"({ingest_s / args.runs * 1000:.2f} ms/run; writing the files took {write_s:.1f} s)")
    timed(f"re-ingest the last batch ({len(files)} duplicates)", lambda: _ingest(db_path, files), res)
    shutil.rmtree(staging, ignore_errors=True)
    with history.open_history(db_path, readonly=True) as db:
        keys = timed("list the series (primary metrics)", lambda: query.primary_keys(db), res)
        key = next(k for k in keys if k.metric == "tpot" and k.cell_id.startswith("torch"))
        pts = timed(f"all points of one series ({args.runs} runs)", lambda: query.points(db, key), res)
        timed("last 200 points of one series", lambda: query.points(db, key, last=200), res)
        timed("change points of one series (window 200)", lambda: query.find_changes(db, key), res)
        timed(f"change points of all {len(keys)} series (window 200)", lambda: query.analyse(db), res)
        timed("export every point (rows)", lambda: query.export_rows(db, runner_class=key.runner_class), res)
    timed("perfsuite history show", lambda: cli(["history", "show", "--db", str(db_path)]), res)
    timed("perfsuite report (9 plots)", lambda: cli(["report", "--db", str(db_path), "--out", str(out / "report")]),
          res)
    size = db_path.stat().st_size
    print(f"database: {size / 2**20:.1f} MiB ({size / args.runs / 1024:.1f} KiB/run), {len(pts)} points per series")
    (out / "timing.json").write_text(json.dumps({"runs": args.runs, "batch": args.batch, "seconds": res,
                                                 "db_bytes": size}, indent=1))
    return 0


def _ingest(db_path: Path, files: list[str]) -> None:
    with history.open_history(db_path) as db:
        rep = history.ingest(db, [Path(f) for f in files])
    assert not rep.added and len(rep.duplicates) == len(files)


if __name__ == "__main__":
    sys.exit(main())
