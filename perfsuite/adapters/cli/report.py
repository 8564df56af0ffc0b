"""``perfsuite report --out DIR``: markdown summary + static HTML report from the history and the latest runs.

  perfsuite report --out perf-report                                   # history (default db), its newest runs
  perfsuite report --db h.sqlite --run nightly-*.json --ab ab.json --ops ops/ops-matrix.json --out perf-report
  cat perf-report/summary.md >> "$GITHUB_STEP_SUMMARY"

Writes DIR/summary.md, DIR/report.html (self-contained: inline SVG, no script, works offline) and
DIR/report.json. Reads only; the history is never changed. Needs the `report` extra (matplotlib).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, check_locations
from perfsuite.facts.errors import UsageError
from perfsuite.verdict import changepoint as cpd


def register(sub: Any) -> None:
    p = add_command(sub, "report",
                    "markdown summary + HTML report (history, change points, A/B, ops matrix)", __doc__, main)
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--db", default=None, help="history database (default: $PERFSUITE_HISTORY, [tool.perfsuite] "
                   "history, ~/.local/share/perfsuite/history.sqlite); --no-history to go without")
    p.add_argument("--no-history", action="store_true", help="report only the files given")
    p.add_argument("--run", type=Path, action="append", default=[], help="latest run JSON (repeatable; default: "
                   "the newest run of each runner class in the history)")
    p.add_argument("--ab", type=Path, action="append", default=[], help="`perfsuite ab --json` result (repeatable; "
                   "default: the newest A/B in the history)")
    p.add_argument("--ops", type=Path, default=None, help="ops-matrix.json of `perfsuite ops`")
    p.add_argument("--ops-previous", type=Path, default=None, help="an earlier ops-matrix.json to diff against")
    p.add_argument("--title", default="perfsuite report")
    p.add_argument("--new-within", type=int, default=3, help="a change point is new within this many runs (3)")
    p.add_argument("--max-plots", type=int, default=60, help="history plots at most (series with changes first)")
    p.add_argument("--max-pvalue", type=float, default=cpd.DEFAULT_MAX_PVALUE)
    p.add_argument("--min-size", type=int, default=cpd.DEFAULT_MIN_SIZE)
    p.add_argument("--lock-timeout", type=float, default=10.0)


def main(args: argparse.Namespace) -> int:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("the HTML report needs matplotlib: pip install 'perfsuite[report]'") from None
    from perfsuite.orchestrate import history, report

    check_locations((args.out, "--out", "folder"))
    db = None
    if not args.no_history:
        db = history.open_history(history.resolve_db(args.db), readonly=True, lock_timeout_s=args.lock_timeout)
    elif not (args.run or args.ab or args.ops):
        raise UsageError("--no-history and nothing to report: pass --run, --ab or --ops")
    try:
        data = report.collect(db, runs=args.run, ab=args.ab, ops=args.ops, ops_previous=args.ops_previous,
                              title=args.title, new_within=args.new_within, max_series=args.max_plots,
                              detect={"max_pvalue": args.max_pvalue, "min_size": args.min_size})
    finally:
        if db is not None:
            db.close()
    paths = report.write(data, args.out)
    print(f"wrote {paths['markdown']}, {paths['html']} ({paths['html'].stat().st_size // 1024} KiB), {paths['json']}")
    print(f"{len(data.findings)} change point(s) ({len(data.new_findings)} within the last {args.new_within} runs), "
          f"{len(data.ab)} A/B verdict(s), {len(data.series)} series plotted")
    return 0
