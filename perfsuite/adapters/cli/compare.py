"""``perfsuite compare BASE CURRENT``: the regression gate between stored runs.

BASE and CURRENT are each a pytest-benchmark JSON file written by perfsuite or a storage folder of run files
(e.g. baselines/<runner-class>/). Exit status: 0 no regression, 1 a significant regression beyond a threshold,
2 unusable input (corrupt/foreign files, invalid [tool.perfsuite.gate]).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, check_locations, usage_errors
from perfsuite.facts.errors import UsageError
from perfsuite.orchestrate import load
from perfsuite.verdict import report, values
from perfsuite.verdict.decide import verdicts_json
from perfsuite.verdict.policy import PolicyError, load_config
from perfsuite.verdict.runs import compare_runs, unmatched
from perfsuite.verdict.stats import holm_adjusted


def register(sub: Any) -> None:
    p = add_command(sub, "compare", "gate CURRENT run(s) against BASE run(s): exit 1 on a regression", __doc__, main)
    p.add_argument("base", type=Path, help="baseline: a run JSON file or a folder of run files")
    p.add_argument("current", type=Path, help="current: a run JSON file or a folder of run files")
    p.add_argument("--config", type=Path, default=None, help="pyproject.toml with [tool.perfsuite.gate] "
                   "(default: the one above the working directory)")
    p.add_argument("--alpha", type=float, default=None, help="family-wise false-alarm rate (overrides config)")
    p.add_argument("--baseline-runs", type=int, default=None, help="use the newest N baseline runs")
    p.add_argument("--correction", choices=("holm", "bonferroni"), default="holm")
    p.add_argument("--json", type=Path, default=None, help="also write the verdicts here as JSON")


def main(args: argparse.Namespace) -> int:
    check_locations((args.json, "--json", "file"))
    with usage_errors(PolicyError, load.InputError):
        config = load_config(args.config, alpha=args.alpha, baseline_runs=args.baseline_runs)
        base = load.load_runs(args.base)
        cls = load.runner_class_of(base[0])
        try:
            current = load.load_runs(args.current, runner_class=cls, role="current")
        except load.InputError as exc:
            raise load.InputError(f"{exc} (baseline {args.base} is runner class {cls!r})") from None
    verdicts = compare_runs(base, current, config, args.correction)
    if not verdicts:
        raise UsageError(f"no benchmark of {args.current} has a baseline in {args.base} (matched by fullname or "
                         "name); nothing gated")
    adj = holm_adjusted([v.p_worse for v in verdicts])
    for line in report.table(verdicts, adj if args.correction == "holm" else None):
        print(line)
    n_base = min(len(base), config.baseline_runs)
    print(f"baseline: {n_base} run(s) of {args.base}; current: {len(current)} run(s); alpha={config.alpha:g} "
          f"family-wise ({args.correction} over {sum(p is not None for p in adj)} statistical metrics)")
    missing = unmatched(base, current)
    if missing:
        print(f"not gated (no baseline): {', '.join(values.short_name(m) for m in missing)}")
    if args.json:
        args.json.write_text(verdicts_json(verdicts))
    failed = [v for v in verdicts if v.failed]
    if failed:
        print(f"perfsuite compare: {len(failed)} regression(s):", file=sys.stderr)
        for v in failed:
            print(f"  {values.short_name(v.test)} {report.describe(v)}", file=sys.stderr)
        return 1
    return 0
