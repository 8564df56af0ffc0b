"""``perfsuite calibrate``: how trustworthy is the gate on THIS machine?

Runs the same environment repeatedly in separate processes (A/A), optionally with an injected per-decode-step
slowdown (env PERFSUITE_INJECT_DECODE_SLOWDOWN, honoured by the torch backend), in a random interleaved order,
then evaluates offline: the gate's false-alarm rate over A/A comparisons, its detection rate of each injected
slowdown, the minimum detectable effect, the between-run noise (put it in [tool.perfsuite.gate] between_run_cv)
and, side by side, pytest-benchmark's --benchmark-compare-fail=median:5% on the same runs.

  perfsuite calibrate --runs 12 --inject 0.05,0.10 --inject-runs 6 -- -k torch-tiny-llama --perf-backend torch
  perfsuite calibrate --from benchmarks/data/gate_corpus         # evaluate runs collected before
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perfsuite.gate import load
from perfsuite.gate.evaluate import evaluate
from perfsuite.gate.policy import PolicyError, check_metric, load_config
from perfsuite.gate.runner import DEFAULT_TESTS, INJECT_ENV, Env, run_once


def register(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="A/A (and injected-slowdown) runs: false-alarm rate, power and MDE here",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=12, help="A/A runs (default 12; >= 3)")
    p.add_argument("--inject", default="", help="comma-separated slowdown fractions, e.g. 0.05,0.10")
    p.add_argument("--inject-runs", type=int, default=6, help="runs per injected fraction (default 6)")
    p.add_argument("--python", default=None, help="interpreter of the environment (default: this one)")
    p.add_argument("--tests", default=DEFAULT_TESTS)
    p.add_argument("--profile", default="smoke")
    p.add_argument("--budget-s", type=float, default=None, help="start no run after this many seconds")
    p.add_argument("--out", type=Path, default=None, help="keep run files here (NNNN_<label>.json)")
    p.add_argument("--from", dest="from_dir", type=Path, default=None, help="evaluate existing run files")
    p.add_argument("--config", type=Path, default=None, help="pyproject.toml with [tool.perfsuite.gate]")
    p.add_argument("--baseline-runs", type=int, default=None, help="baseline size per comparison")
    p.add_argument("--metric", action="append", default=[], help="detection metric(s) (default: the policies')")
    p.add_argument("--draws", type=int, default=5, help="random baselines per current run (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=main, accepts_extra=True)


def main(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, baseline_runs=args.baseline_runs)
        for m in args.metric:
            check_metric("--metric", m)
    except PolicyError as exc:
        print(f"perfsuite calibrate: {exc}", file=sys.stderr)
        return 2
    if args.from_dir:
        out = args.from_dir
    else:
        fracs = [float(f) for f in args.inject.split(",") if f.strip()]
        plan = [0.0] * args.runs + [f for f in fracs for _ in range(args.inject_runs)]
        random.Random(args.seed).shuffle(plan)
        out = args.out or Path(tempfile.mkdtemp(prefix="perfsuite-calibrate-"))
        out.mkdir(parents=True, exist_ok=True)
        extra = list(getattr(args, "extra", []) or [])
        if extra[:1] == ["--"]:
            extra = extra[1:]
        t0 = time.time()
        for i, f in enumerate(plan, 1):
            if args.budget_s and time.time() - t0 > args.budget_s:
                print(f"budget spent: stopping after {i - 1} runs", flush=True)
                break
            label = "aa" if f == 0 else f"inj{f:g}"
            path = out / f"{i:04d}_{label}.json"
            env = Env(label, args.python, env=((INJECT_ENV, f"{f:g}"),))
            rc, wall, tail = run_once(env, path, extra, Path.cwd(), tests=args.tests, profile=args.profile)
            print(f"{i}/{len(plan)} {label} rc={rc} {wall:.0f}s", flush=True)
            if rc != 0:
                print(f"perfsuite calibrate: run {i} failed (exit {rc}):\n{tail}", file=sys.stderr)
                return 2
    try:
        runs = load.load_runs(out)
    except load.InputError as exc:
        print(f"perfsuite calibrate: {exc}", file=sys.stderr)
        return 2
    try:
        ev = evaluate(runs, config, draws=args.draws, seed=args.seed, detect_metrics=args.metric or None)
    except ValueError as exc:
        print(f"perfsuite calibrate: {exc}", file=sys.stderr)
        return 2
    for line in ev.lines():
        print(line)
    print(f"runs in {out}; gate: alpha={config.alpha:g}, baseline_runs={config.baseline_runs}, power "
          f"{config.power:g} for MDE")
    return 0
