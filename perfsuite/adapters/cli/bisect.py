"""``perfsuite bisect --good REV --bad REV``: which commit made it slower? Pinpoint-style: a binary search over the
first-parent commits after GOOD up to BAD, each step a budgeted two-tree A/B of one commit against GOOD, both measured
now on this machine (the machinery of ``perfsuite ab``).

The bad end is measured first: its change sets the split point (half of it; a commit is called by the side it is
closer to) and the metric the search follows (the one it regressed most). An undecided step is retried once with
twice the budget; if it stays undecided the search ends with the range it narrowed to. A commit whose tree does not
run is skipped, as ``git bisect skip`` does. The answer comes with its A/B interval, its subject and the operator diff
against its parent (torch and ONNX Runtime cells; perfsuite.verdict.opdiff).

Examples:
  perfsuite bisect --good v1.4 --bad HEAD --cells 'torch-tiny-llama-*' --budget 2m --json bisect.json

Exit status: 0 found (or no regression between the two), 1 the search ended without a single commit (undecided or
skipped range), 2 bad input, 130 interrupted (the steps so far are in --json).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import sys
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, check_locations, measuring, parse_duration, usage_errors
from perfsuite.verdict.confirm_decision import interval_text


def register(sub: Any) -> None:
    p = add_command(sub, "bisect", "which commit between --good and --bad made it slower? A/B per step", __doc__,
                    main)
    p.add_argument("--good", required=True, metavar="REV", help="a commit known to be fast (sha, tag, branch)")
    p.add_argument("--bad", default="HEAD", metavar="REV", help="a commit known to be slow (default: HEAD)")
    p.add_argument("--budget", default="2m", help="wall-time budget of one step's A/B, e.g. 90s, 3m (default 2m)")
    p.add_argument("--profile", default="smoke", help="profile whose cells and generations are used (default smoke)")
    p.add_argument("--backend", default=None, help="comma-separated backends (default: the profile's)")
    p.add_argument("--model", default=None, help="comma-separated models (default: the profile's)")
    p.add_argument("--device", default="cpu", help="cpu | cuda (default cpu)")
    p.add_argument("--cells", default="*", help="glob on cell ids, e.g. 'torch-tiny-llama-*' (default all)")
    p.add_argument("--python", default=None, metavar="PY", help="interpreter of both sides (default: this one)")
    p.add_argument("--config", type=Path, default=None, help="pyproject.toml with [tool.perfsuite.gate] "
                   "(default: the one above the working directory)")
    p.add_argument("--json", type=Path, default=None, help="write the result and every step here (kept on Ctrl-C)")


def main(args: argparse.Namespace) -> int:
    from perfsuite.facts import TREE
    from perfsuite.machine import cotenant
    from perfsuite.measure.worker import pool
    from perfsuite.orchestrate import bisect
    from perfsuite.orchestrate.confirm.worktree import CannotConfirm, temporary_worktree, toplevel
    from perfsuite.verdict.policy import PolicyError, load_config

    check_locations((args.json, "--json", "file"), cache=True)
    budget = parse_duration(args.budget)
    with usage_errors(PolicyError, CannotConfirm, bisect.BisectError):
        config = load_config(args.config)
        top = toplevel(Path.cwd())
        good, bad = bisect.resolve(top, args.good, "good"), bisect.resolve(top, args.bad, "bad")
        commits = bisect.first_parent_commits(top, good, bad)
    rel = TREE.relative_to(top) if TREE == top or top in TREE.parents else Path(".")

    def say(line: str) -> None:
        print(f"perfsuite bisect: {line}", flush=True)

    threads = cotenant.choose({"A": {}, "B": {}}, "auto")
    env = threads.env + cotenant.hash_seed_env({}, random.Random())
    say(f"{len(commits)} first-parent commit(s) after good {good[:12]} up to bad {bad[:12]}; each step an A/B of one "
        f"commit against good, budget {budget:.0f} s (twice that on a retry); {threads.line}")
    result = bisect.Result(good, bad, commits)
    try:
        with measuring("bisect"), temporary_worktree(top, good) as wt:  # one perfsuite run measures at a time
            good_side = pool.Side(wt / rel, args.python or sys.executable, "A", env)
            search = bisect.Bisection(top, rel, good_side, {"profile": args.profile, "backend": args.backend,
                                                            "model": args.model, "device": args.device,
                                                            "cells": args.cells}, config, env, args.python or "", say)
            bisect.search(commits, search.step, budget, good=good, tau_floor=math.log1p(config.ab_threshold),
                          result=result)
            if result.first_bad:
                _operators(top, rel, search, result, good_side.python, env, wt.parent, args.json, say)
    except KeyboardInterrupt:
        result.stopped = "interrupted"
        say(f"interrupted after {len(result.steps)} step(s); no worktree or worker is left"
            + (f"; the steps so far are in {args.json}" if args.json else ""))
        return 130
    finally:
        if args.json:
            args.json.write_text(json.dumps(result.as_dict(), indent=1))
    for line in _answer(top, result, args):
        say(line)
    return 0 if result.stopped in ("found", "no regression") else 1


def _answer(top: Path, res: Any, args: argparse.Namespace) -> list[str]:
    from perfsuite.orchestrate import bisect

    if res.stopped == "no regression":
        return [f"the bad end {res.bad[:12]} is not slower than good {res.good[:12]}: nothing to bisect"]
    step = next((s for s in reversed(res.steps) if s.commit == res.first_bad), None)
    if res.first_bad and step is not None:
        return [f"first bad commit: {res.first_bad} {bisect.subject(top, res.first_bad)!r}: {step.note} B/A "
                f"{step.change:+.1%} {interval_text(step.low, step.high)} against good, {step.pairs} pair(s)"]
    why = "a step stayed undecided" if res.stopped == "inconclusive" else "commits around it do not run"
    if len(res.candidates) <= 8:
        return [f"no single commit ({why}): the first bad one is among " + ", ".join(c[:12] for c in res.candidates)]
    at = res.commits.index(res.candidates[0])
    good, bad = (res.commits[at - 1] if at else res.good)[:12], res.candidates[-1][:12]
    longer = res.stopped == "inconclusive"
    more = f" --budget {4 * parse_duration(args.budget):.0f}s" if longer else ""
    more += "".join(f" --{k} {shlex.quote(v)}" for k, v, default in
                    (("profile", args.profile, "smoke"), ("backend", args.backend, None), ("model", args.model, None),
                     ("device", args.device, "cpu"), ("cells", args.cells, "*")) if v != default)
    return [f"no single commit ({why}): the first bad one is among the {len(res.candidates)} first-parent commits "
            f"after {good} up to {bad} (`git log --first-parent {good}..{bad}`; all in --json); to narrow it, run "
            f"again over that range{' with a longer budget' if longer else ''}: `perfsuite bisect --good {good} --bad "
            f"{bad}{more}`"]


def _operators(top: Path, rel: Path, search: Any, res: Any, python: str, env: Any, workdir: Path,
               json_path: Path | None, say: Any) -> None:
    """The operator diff of the first bad commit against its parent (profile pairs, not timed)."""
    from perfsuite.measure.worker import pool
    from perfsuite.orchestrate.bisect import _git
    from perfsuite.orchestrate.confirm.worktree import temporary_worktree
    from perfsuite.orchestrate.opdiff_run import operator_diff
    from perfsuite.verdict.opdiff import lines

    step = next(s for s in reversed(res.steps) if s.commit == res.first_bad)
    cell = search.cells.get(search.tracked[0]) if search.tracked else None
    if cell is None:
        return
    parent = _git(top, "rev-parse", f"{res.first_bad}^")
    with temporary_worktree(top, parent) as pa, temporary_worktree(top, res.first_bad) as bb:
        sides = {"a": pool.Side(pa / rel, python, "A", env), "b": pool.Side(bb / rel, python, "B", env)}
        d = operator_diff(sides, cell, math.exp(math.log1p(step.change)), workdir,
                          json_path.parent if json_path else None, say=say)
    res.operators = d.as_dict()
    for line in lines(d):
        say(line)
