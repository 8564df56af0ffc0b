"""``perfsuite history``: the run history database (SQLite) and change-point detection over it.

  perfsuite history ingest baselines/cpu-intel-xeon-amx-2c nightly.json    # files or folders of *.json
  perfsuite history show [--runner-class RC] [--runs 20]
  perfsuite history export --format csv --out history.csv
  perfsuite history changepoints [--new-within 3 --fail-on-regression] [--json cps.json]
  perfsuite history migrate

The database: --db, else $PERFSUITE_HISTORY, else [tool.perfsuite] history, else
$XDG_DATA_HOME/perfsuite/history.sqlite (~/.local/share/perfsuite/history.sqlite). See docs/history.md.
Exit status: 0; 1 when --fail-on-regression finds a new regression; 2 bad input (one line, nothing changed).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, check_locations
from perfsuite.facts.errors import UsageError
from perfsuite.verdict import changepoint as cpd


def _action(hs: Any, name: str, help_: str, filters: bool = False) -> argparse.ArgumentParser:
    """An action's parser with the options every action takes (and, with ``filters``, the series filters)."""
    p: argparse.ArgumentParser = hs.add_parser(name, help=help_)
    p.add_argument("--db", default=None, help="history database file (default: see `perfsuite history -h`)")
    p.add_argument("--lock-timeout", type=float, default=10.0, help="seconds to wait for a lock (default 10)")
    if filters:
        p.add_argument("--runner-class", default=None, help="only this runner class")
        p.add_argument("--cell", default=None, help="only this cell id")
        p.add_argument("--metric", default=None, choices=("ttft", "tpot", "e2el"), help="only this test metric")
    return p


def register(sub: Any) -> None:
    p = add_command(sub, "history", "run history (SQLite): ingest, show, export, change points", __doc__, main)
    hs = p.add_subparsers(dest="history_command", metavar="ACTION")
    ing = _action(hs, "ingest", "add run files (pytest-benchmark JSON, `perfsuite ab --json`); idempotent")
    ing.add_argument("paths", nargs="+", type=Path, help="files, or folders searched for *.json")
    ing.add_argument("--runner-class", default=None,
                     help="refuse files of any other runner class (and pin a new database to this class)")
    show = _action(hs, "show", "runs and series in the database", filters=True)
    show.add_argument("--runs", type=int, default=20, help="newest runs to list (default 20)")
    exp = _action(hs, "export", "every point with its run's facts, as CSV or JSON lines")
    exp.add_argument("--runner-class", default=None)
    exp.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    exp.add_argument("--out", type=Path, default=None, help="file (default: stdout)")
    cp = _action(hs, "changepoints", "E-divisive change points of each series, with the A/B to confirm", filters=True)
    cp.add_argument("--name", action="append", default=None,
                    help="value names to analyse (repeatable; default: each test's median_{ttft,tpot,e2el}_ms)")
    cp.add_argument("--max-pvalue", type=float, default=cpd.DEFAULT_MAX_PVALUE,
                    help=f"significance of a change point (default {cpd.DEFAULT_MAX_PVALUE})")
    cp.add_argument("--permutations", type=int, default=cpd.DEFAULT_PERMUTATIONS)
    cp.add_argument("--min-size", type=int, default=cpd.DEFAULT_MIN_SIZE,
                    help=f"points on each side of a change (default {cpd.DEFAULT_MIN_SIZE})")
    cp.add_argument("--window", type=int, default=200, help="analyse the last N points of a series (default 200)")
    cp.add_argument("--new-within", type=int, default=None,
                    help="report only changes that showed up in the last N points (e.g. 3 for a nightly)")
    cp.add_argument("--min-change", type=float, default=0.0,
                    help="ignore changes smaller than this fraction, e.g. 0.02")
    cp.add_argument("--fail-on-regression", action="store_true", help="exit 1 if a reported change is a regression")
    cp.add_argument("--budget", default="5m", help="--budget of the suggested `perfsuite ab` (default 5m)")
    cp.add_argument("--json", type=Path, default=None, help="also write the findings here")
    _action(hs, "migrate", "bring an older database to this perfsuite's schema")
    p.set_defaults(history_parser=p)


def _open(args: argparse.Namespace, readonly: bool, create: bool = True) -> Any:
    from perfsuite.orchestrate import history

    return history.open_history(history.resolve_db(args.db), readonly=readonly, create=create,
                                lock_timeout_s=args.lock_timeout)


def _expand(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(q for q in p.rglob("*.json") if q.is_file())
            if not found:
                raise UsageError(f"{p}: a folder with no *.json run files")
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise UsageError(f"{p}: no such file or folder; nothing was changed")
    return out


def main(args: argparse.Namespace) -> int:
    action = getattr(args, "history_command", None)
    if action is None:
        args.history_parser.print_help()
        return 2
    check_locations((getattr(args, "out", None), "--out", "file"), (getattr(args, "json", None), "--json", "file"))
    if action == "ingest":
        return _ingest(args)
    if action == "migrate":
        from perfsuite.orchestrate.history import SCHEMA_VERSION

        with _open(args, readonly=False, create=False) as db:
            print(f"{db.path}: schema {SCHEMA_VERSION}")
        return 0
    with _open(args, readonly=True) as db:
        return {"show": _show, "export": _export, "changepoints": _changepoints}[action](db, args)


def _ingest(args: argparse.Namespace) -> int:
    from perfsuite.orchestrate import history

    files = _expand(args.paths)
    with _open(args, readonly=False) as db:
        rep = history.ingest(db, files, runner_class=args.runner_class)
        total = db.query("SELECT count(*) FROM runs")[0][0]
    for path, rid in rep.added:
        print(f"added run {rid}: {path}")
    for path, rid in rep.duplicates:
        print(f"already there (run {rid}): {path}")
    for path, where in rep.dropped:
        print(f"perfsuite history: {path}: dropped {sum(where.values())} non-finite value(s) (NaN/inf): "
              + ", ".join(f"{k} {n}" for k, n in where.items()), file=sys.stderr)
    print(f"{db.path}: {len(rep.added)} added, {len(rep.duplicates)} already there, {total} runs in all")
    return 0


def _show(db: Any, args: argparse.Namespace) -> int:
    from perfsuite.orchestrate.history import query

    rows = query.runs(db, runner_class=args.runner_class, last=args.runs)
    n = db.query("SELECT count(*) FROM runs")[0][0]
    print(f"{db.path}: {n} runs (newest {len(rows)} below)")
    print(f"{'run':>5} {'kind':4} {'runner class':24} {'profile':8} {'commit':10} {'time (UTC)':19} results")
    for r in rows:
        count = r["results"] if r["kind"] == "run" else f"{r['verdicts']} verdicts"
        print(f"{r['id']:>5} {r['kind']:4} {r['runner_class'][:24]:24} {str(r['profile'] or '-')[:8]:8} "
              f"{(r['commit_id'] or '-')[:10]:10} {r['run_time'][:19]:19} {count}")
    keys = query.primary_keys(db, runner_class=args.runner_class, cell=args.cell, metric=args.metric)
    width = max((len(k.cell_id) for k in keys), default=10)
    current = None
    for k in keys:
        if k.runner_class != current:
            current = k.runner_class
            print(f"\nseries of {current}:\n{'cell':{width}} {'value':22} {'points':>6} {'last':>10} {'median':>10}")
        pts = query.points(db, k)
        print(f"{k.cell_id:{width}} {k.metric + ':' + k.name:22} {len(pts):>6} {pts[-1].value:>10.4g} "
              f"{statistics.median(p.value for p in pts):>10.4g}")
    return 0


def _export(db: Any, args: argparse.Namespace) -> int:
    from perfsuite.orchestrate.history import query

    rows = query.export_rows(db, runner_class=args.runner_class)
    buf = io.StringIO()
    if args.format == "csv":
        cols = list(rows[0]) if rows else ["runner_class", "cell_id", "metric", "name", "process", "value"]
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    else:
        buf.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    if args.out:
        args.out.write_text(buf.getvalue())
        print(f"wrote {len(rows)} points to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(buf.getvalue())
    return 0


def _changepoints(db: Any, args: argparse.Namespace) -> int:
    from perfsuite.orchestrate.history import query

    if args.min_size < 2:
        raise UsageError("--min-size must be >= 2")
    if not 0 < args.max_pvalue < 1:
        raise UsageError("--max-pvalue must be between 0 and 1")
    findings, notes = query.analyse(db, runner_class=args.runner_class, cell=args.cell, metric=args.metric,
                                    names=args.name, window=args.window, new_within=args.new_within,
                                    min_change=args.min_change, max_pvalue=args.max_pvalue,
                                    permutations=args.permutations, min_size=args.min_size)
    for n in notes:
        print(n)
    for f in findings:
        c = f.change
        print(f"{f.kind.upper()}: {f.key.runner_class} {f.key.label()}: {c.change:+.1%} "
              f"(median {c.before:.4g} -> {c.after:.4g}), p={c.p_value:.3g}, between {f.commit_range()} "
              f"({f.before.run_time[:10]} .. {f.after.run_time[:10]}), {f.since} point(s) since")
        for line in f.ab_commands(args.budget):
            print(f"    confirm: {line}")
    print(f"{len(findings)} change point(s)" + (f" within the last {args.new_within} point(s)"
                                                  if args.new_within is not None else ""))
    if args.json:
        args.json.write_text(json.dumps({"findings": [f.as_dict() for f in findings], "notes": notes}, indent=1))
    if args.fail_on_regression and any(f.kind == "regression" for f in findings):
        return 1
    return 0
