"""``perfsuite ab``: pull-request gate by randomized paired A/B runs on one machine.

A is the reference (e.g. the main branch's venv), B the candidate. For k pairs, A and B each run the perf tests
in a fresh process, back to back, in a random order per pair (a coin flip). The gate is a paired t-test on the
per-pair log-ratios log(B_i / A_i) of each run's aggregate: slow drift of the machine cancels inside a pair, and
between-process noise enters through the spread of the k ratios. Holm over all gated metrics.

Examples:
  perfsuite ab --a-python ../main/.venv/bin/python --b-python .venv/bin/python --pairs 6 -- -k torch-tiny-llama
  perfsuite ab --a-cmd "tox -e base --" --b-cmd "tox -e pr --" --pairs 6
  perfsuite ab --b-env PERFSUITE_INJECT_DECODE_SLOWDOWN=0.05 --pairs 6   # a known 5 % regression

Exit status: 0 no regression, 1 regression, 2 bad input or a run failed. Extra arguments go to pytest.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perfsuite.gate import load, report
from perfsuite.gate.compare import compare_paired
from perfsuite.gate.policy import PolicyError, load_config
from perfsuite.gate.runner import DEFAULT_TESTS, Env, run_once
from perfsuite.gate.stats import holm


def register(sub: Any) -> None:
    p = sub.add_parser("ab", help="randomized paired A/B runs of two environments; exit 1 if B regressed",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for side in ("a", "b"):
        g = p.add_mutually_exclusive_group()
        g.add_argument(f"--{side}-python", default=None, help=f"interpreter of {side.upper()} (runs -m pytest)")
        g.add_argument(f"--{side}-cmd", default=None, help=f"command prefix of {side.upper()} that runs pytest, "
                       "e.g. 'tox -e base --'")
        p.add_argument(f"--{side}-env", action="append", default=[], metavar="KEY=VALUE",
                       help=f"extra environment variable for {side.upper()} (repeatable)")
    p.add_argument("--pairs", type=int, default=6, help="number of A/B pairs k (default 6; >= 2)")
    p.add_argument("--seed", type=int, default=None, help="seed of the order coin flips (default: random)")
    p.add_argument("--tests", default=DEFAULT_TESTS, help=f"test path (default {DEFAULT_TESTS})")
    p.add_argument("--profile", default="smoke", help="--perf-profile of the runs (default smoke)")
    p.add_argument("--out", type=Path, default=None, help="keep the run files here (pair_NN_a.json, ...)")
    p.add_argument("--from", dest="from_dir", type=Path, default=None,
                   help="re-evaluate the run files of an earlier --out folder instead of running")
    p.add_argument("--config", type=Path, default=None, help="pyproject.toml with [tool.perfsuite.gate]")
    p.add_argument("--alpha", type=float, default=None)
    p.add_argument("--json", type=Path, default=None, help="also write the verdicts here as JSON")
    p.set_defaults(func=main, accepts_extra=True)


def _env(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for it in items:
        if "=" not in it:
            raise ValueError(f"--a-env/--b-env {it!r}: expected KEY=VALUE")
        k, v = it.split("=", 1)
        out.append((k, v))
    return tuple(out)


def main(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, alpha=args.alpha)
    except PolicyError as exc:
        print(f"perfsuite ab: {exc}", file=sys.stderr)
        return 2
    if args.from_dir:
        out = args.from_dir
        k = len(sorted(out.glob("pair_*_a.json")))
    else:
        if args.pairs < 2:
            print("perfsuite ab: --pairs must be >= 2 (a paired test needs a spread)", file=sys.stderr)
            return 2
        try:
            a = Env("A", args.a_python, args.a_cmd, _env(args.a_env))
            b = Env("B", args.b_python, args.b_cmd, _env(args.b_env))
        except ValueError as exc:
            print(f"perfsuite ab: {exc}", file=sys.stderr)
            return 2
        out = args.out or Path(tempfile.mkdtemp(prefix="perfsuite-ab-"))
        out.mkdir(parents=True, exist_ok=True)
        rng = random.Random(args.seed)
        extra = list(getattr(args, "extra", []) or [])
        if extra[:1] == ["--"]:
            extra = extra[1:]
        root = Path.cwd()
        k = args.pairs
        for i in range(1, k + 1):
            order = [("a", a), ("b", b)]
            if rng.random() < 0.5:
                order.reverse()
            for side, env in order:
                path = out / f"pair_{i:02d}_{side}.json"
                rc, wall, tail = run_once(env, path, extra, root, tests=args.tests, profile=args.profile)
                print(f"pair {i}/{k} {side.upper()} rc={rc} {wall:.0f}s", flush=True)
                if rc != 0 or not path.is_file():
                    print(f"perfsuite ab: the {side.upper()} run of pair {i} failed (exit {rc}):\n{tail}",
                          file=sys.stderr)
                    return 2
            (out / "order.json").write_text(json.dumps({"seed": args.seed, "pairs": k}))
    try:
        a_runs = [load.load_runs(out / f"pair_{i:02d}_a.json")[0] for i in range(1, k + 1)]
        b_runs = [load.load_runs(out / f"pair_{i:02d}_b.json", load.runner_class_of(a_runs[0]))[0]
                  for i in range(1, k + 1)]
    except load.InputError as exc:
        print(f"perfsuite ab: {exc}", file=sys.stderr)
        return 2
    if k < 2:
        print(f"perfsuite ab: {out}: fewer than 2 pairs", file=sys.stderr)
        return 2
    verdicts = compare_paired(a_runs, b_runs, config)
    ps = [v.p_worse for v in verdicts]
    idx = [i for i, p in enumerate(ps) if p is not None]
    adj: list[float | None] = [None] * len(ps)
    for i, p in zip(idx, holm([ps[i] for i in idx]), strict=False):  # type: ignore[misc]
        adj[i] = p
    for line in report.table(verdicts, adj):
        print(line)
    print(f"A/B: {k} randomized pairs, paired t on log-ratios B/A, alpha={config.alpha:g} family-wise (Holm); "
          f"runs kept in {out}")
    if args.json:
        args.json.write_text(json.dumps([asdict(v) for v in verdicts], indent=1))
    return 1 if any(v.failed for v in verdicts) else 0
