"""``perfsuite ab``: does tree B run slower than tree A? Randomized pairs of fresh worker processes on this
machine, decided sequentially with an always-valid confidence sequence (docs/gate.md).

Each side is a source tree and an interpreter; its worker processes run from its own tree, so they import its
code (a probe checks where each side's ``perfsuite`` comes from). Pairs are added, A and B in random order inside
each pair, until every gated metric is decided, a regression is found, or the wall-time budget is spent. The
false-alarm rate stays at alpha however early it stops (Ville's inequality on a betting martingale).

Examples:
  git worktree add ../base origin/main
  perfsuite ab --a ../base --b . --budget 5m                       # same interpreter for both trees
  perfsuite ab --a ../base --a-python ../base/.venv/bin/python --b . --budget 2m --cells 'torch-*'

Exit status: 0 no regression (unchanged, improvement, or inconclusive), 1 regression, 2 bad input or a worker
failed, 3 inconclusive with --fail-on-inconclusive. Nothing is written to baselines/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import Progress, add_command, check_locations, parse_duration, thread_mode
from perfsuite.facts import config as cfg
from perfsuite.facts.errors import UsageError


def register(sub: Any) -> None:
    p = add_command(sub, "ab",
                    "is tree B slower than tree A? sequential randomized A/B; exit 1 on a regression", __doc__, main)
    for side, default in (("a", None), ("b", ".")):
        up = side.upper()
        p.add_argument(f"--{side}", dest=f"{side}_tree", default=default, metavar="TREE",
                       help=f"source tree of {up} (a perfsuite checkout)" + (" (default: .)" if default else ""))
        p.add_argument(f"--{side}-python", default=None, metavar="PY",
                       help=f"interpreter of {up} (default: this one); it must import perfsuite from its tree")
        p.add_argument(f"--{side}-env", action="append", default=[], metavar="KEY=VALUE",
                       help=f"extra environment variable for {up}'s workers (repeatable)")
    p.add_argument("--threads", type=thread_mode, default="auto", metavar="auto|cell|N",
                   help="auto (default): both sides' workers run with OMP_NUM_THREADS = the free cores when another "
                   "process holds cores, and with 1 on a machine of 2 cores (perfsuite.machine.cotenant); cell: every "
                   "cell at its own default; N: both sides at N threads")
    p.add_argument("--zygote", choices=("shared", "per-side"), default="shared",
                   help="shared (default): every forked worker of both sides is a child of one pre-imported "
                   "interpreter (when both sides run one interpreter with one environment), so the sides differ by "
                   "their code only; per-side: one zygote per side, as before 2026-12-04 "
                   "(perfsuite.measure.worker.zygote)")
    p.add_argument("--pairs", choices=("lockstep", "sequential"), default="lockstep",
                   help="lockstep (default): a pair's two workers alive together, taking turns generation by "
                   "generation, so drift lands on both sides (needs both trees to support it, else sequential); "
                   "sequential: one worker after the other")
    p.add_argument("--budget", default="5m", help="wall-time budget, e.g. 90s, 2m, 1h (default 5m)")
    p.add_argument("--max-pairs", type=int, default=1000, help="stop after this many pairs (default 1000)")
    p.add_argument("--profile", default="smoke", help="profile whose cells and generations are used (default smoke)")
    p.add_argument("--backend", default=None, help="comma-separated backends (default: the profile's)")
    p.add_argument("--model", default=None, help="comma-separated models (default: the profile's)")
    p.add_argument("--device", default="cpu", help="cpu | cuda (default cpu)")
    p.add_argument("--cells", default="*", help="glob on cell ids, e.g. 'torch-tiny-llama-*' (default all)")
    p.add_argument("--config", type=Path, default=None, help="pyproject.toml with [tool.perfsuite.gate] "
                   "(default: the one above the working directory)")
    p.add_argument("--alpha", type=float, default=None, help="family-wise false-alarm rate (default: config)")
    p.add_argument("--threshold", type=float, default=None, help="relative slowdown that counts as a regression "
                   "(default: config ab_threshold, 0.01)")
    p.add_argument("--margin", type=float, default=None, help="equivalence margin for 'unchanged' (default: "
                   "config ab_margin, 0.02)")
    p.add_argument("--seed", type=int, default=None, help="seed of the order coin flips (default: random)")
    p.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when the budget ends undecided")
    p.add_argument("--out", type=Path, default=None, help="keep worker files and pairs.jsonl here")
    p.add_argument("--json", type=Path, default=None, help="write the verdicts and every pair here as JSON")
    p.add_argument("--operators", type=int, default=5, metavar="PAIRS",
                   help="profile pairs of a regressed cell's operator diff, within 60 s (default 5; 0: none)")


# --------------------------------------------------------------------------------------------------- sides
def _env(items: list[str], side: str) -> tuple[tuple[str, str], ...]:
    out = []
    for it in items:
        key, sep, value = it.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise UsageError(f"--{side}-env {it!r}: expected KEY=VALUE with a variable name as KEY")
        out.append((key, value))
    return tuple(out)


def _tree(path: str | None, side: str) -> Path:
    if path is None:
        raise UsageError(f"--{side} TREE is required: the reference checkout (e.g. `git worktree add ../base "
                         "origin/main` then --a ../base)")
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise UsageError(f"--{side} {path}: no such directory")
    if not (p / "perfsuite" / "__init__.py").is_file() or cfg.find_pyproject(p) != p / "pyproject.toml":
        raise UsageError(f"--{side} {path}: not a perfsuite checkout (needs perfsuite/__init__.py and a "
                         "pyproject.toml with [tool.perfsuite] at its top)")
    return p


# ---------------------------------------------------------------------------------------------------- main
def main(args: argparse.Namespace) -> int:
    from perfsuite.adapters.cli._common import measuring, usage_errors  # (here: the module line would not fit)
    from perfsuite.machine import cotenant, precheck
    from perfsuite.measure.worker import pool
    from perfsuite.verdict.policy import PolicyError, load_config

    check_locations((args.out, "--out", "folder"), (args.json, "--json", "file"), cache=True)
    budget = parse_duration(args.budget)
    if args.max_pairs < 2:
        raise UsageError("--max-pairs must be >= 2")
    with usage_errors(PolicyError):
        config = load_config(args.config, alpha=args.alpha, ab_threshold=args.threshold, ab_margin=args.margin)
    envs = {s: _env(getattr(args, f"{s}_env"), s) for s in ("a", "b")}
    threads = cotenant.choose({s.upper(): dict(env) for s, env in envs.items()}, args.threads)
    seed_env = cotenant.hash_seed_env({s.upper(): dict(env) for s, env in envs.items()}, random.Random(args.seed))
    sides = {}
    for s in ("a", "b"):
        tree = _tree(getattr(args, f"{s}_tree"), s)
        python = getattr(args, f"{s}_python") or sys.executable
        sides[s] = pool.Side(tree, python, s.upper(), threads.env + seed_env + envs[s])
        try:
            precheck.check_thread_env(sides[s].environ())
        except precheck.PreflightError as exc:
            raise UsageError(f"side {s.upper()}: {exc}") from None
    with measuring("ab"):
        return _measure(args, sides, config, budget, threads, seed_env)


def _measure(args: argparse.Namespace, sides: dict[str, Any], config: Any, budget: float, threads: Any,
             seed_env: tuple[tuple[str, str], ...]) -> int:
    """The measured part, under the suite lock: the budget covers probes, plans, then the pairs."""
    from perfsuite.adapters.cli._common import usage_errors
    from perfsuite.measure.worker import pool
    from perfsuite.orchestrate import abloop, twotree
    from perfsuite.verdict import confirm_decision as decision
    from perfsuite.verdict import sequential

    started = time.monotonic()
    plan_args = {"profile": args.profile, "backend": args.backend, "model": args.model, "device": args.device,
                 "cells": args.cells}
    with usage_errors(pool.SideError):
        plans, facts = twotree.prepare(sides, plan_args)
    tau, eps = math.log1p(config.ab_threshold), math.log1p(config.ab_margin)
    out_dir = args.out
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(min_interval_s=10.0)

    def say(line: str) -> None:
        print(f"perfsuite ab: {line}", flush=True)

    cells = abloop.same_cells(plans["a"], plans["b"])
    members = abloop.members(cells, config, config.alpha)
    if not members:
        raise UsageError("no statistical gate policy applies to the selected cells; check [tool.perfsuite.gate]")
    say(f"A = {sides['a'].tree}, B = {sides['b'].tree}; {len(cells)} cell(s), {len(members)} gated metric(s), alpha "
        f"{config.alpha:g} (Bonferroni), regression beyond {config.ab_threshold:.1%}, unchanged inside "
        f"±{config.ab_margin:.1%}, budget {budget:.0f} s")
    say(threads.line)
    say(f"PYTHONHASHSEED={dict(seed_env)['PYTHONHASHSEED']} for both sides' zygotes (one hash seed, so the two sides' "
        "workers differ by their code, not by their zygotes' draws)" if seed_env else
        "PYTHONHASHSEED is set by the caller; left as given")

    def decide(m: abloop.Member) -> tuple[str, str]:
        if m.early is not None:  # unchanged at a few-pairs look: it stays so
            return "unchanged", decision.EQUIVALENT
        d = sequential.decide(m.cs, tau, eps)
        if d.kind == "open" and m.cs.looks and (eq := decision.equivalent(m.cs.data, eps)) is not None:
            m.early = (*eq, m.cs.n)
            return "unchanged", decision.EQUIVALENT
        return d.kind, d.note

    def stop(ms: list[abloop.Member]) -> str | None:
        if any(m.kind == "regression" for m in ms):
            return "regression"
        return abloop.all_decided(ms)

    try:
        res = twotree.ab(sides, plans, facts, config, budget_s=budget, decide=decide, stop=stop,
                         max_pairs=args.max_pairs, rng=random.Random(args.seed), zygote=args.zygote, pairs=args.pairs,
                         workdir=out_dir, members=members, say=say, started=started,
                         progress=lambda n, el: progress.update(abloop.progress_line(n, el, budget, members)))
    except twotree.ABInterrupted as exc:  # Ctrl-C: keep the pairs measured so far (a half pair is not one)
        res = exc.result
    run, setup_s = res.run, res.setup_s
    pairs, stop_reason, elapsed = run.pairs, run.stopped, run.elapsed_s + setup_s
    progress.done()
    rows = [abloop.row(m, tau, eps, run.pair_s(len(cells)), config.power) for m in members]
    for line in _table(rows):
        print(line)
    n_pairs = len(pairs) // max(len(cells), 1)
    print(f"{n_pairs} pair(s) per cell in {elapsed:.0f} s (stopped: {stop_reason}); A/B order randomized in every "
          f"pair; always-valid {1 - config.alpha:.0%} family-wise confidence sequences"
          + ("; stopped blind to the values, so intersected with Wilcoxon signed-rank intervals (half of alpha each)"
             if stop_reason in abloop.VALUE_BLIND_STOPS and not all(m.cs.looks for m in members) else "")
          + (f"; engine-start pairs (vLLM): {abloop.FEW_PAIRS_GENERATIONS} timed generations a side, half of "
             f"alpha on Student-t intervals at "
             f"{' and '.join(map(str, sequential.FEW_LOOKS))} pairs" if any(m.cs.looks for m in members) else "")
          + (f"; workers in {out_dir}" if out_dir else ""))
    operators = {}  # a regressed cell's operator diff (profile pairs after the decision, not timed)
    if stop_reason != "interrupted" and args.operators > 0:
        from perfsuite.orchestrate.opdiff_run import operator_diff
        from perfsuite.verdict.opdiff import lines as op_lines

        for cell in res.cells:
            worst = max((m for m in res.members if m.cell_id == cell["id"] and m.kind == "regression"),
                        key=lambda m: m.cs.estimate(), default=None)
            if worst is not None:
                keep = args.json.resolve().parent if args.json else out_dir
                with tempfile.TemporaryDirectory(prefix="perfsuite-opdiff-") as tmp:
                    d = operator_diff(sides, cell, math.exp(worst.cs.estimate()), Path(tmp), keep, say=say,
                                      pairs=args.operators)
                operators[cell["id"]] = d.as_dict()
                print("\n".join(op_lines(d)))
    result = {"kind": "ab", "runner_class": _runner_class(args.device), "profile": plans["b"]["profile"],
              "datetime": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "a": _side_facts(sides["a"]), "b": _side_facts(sides["b"]), "alpha": config.alpha,
              "threads": threads.as_dict(), "hash_seed": dict(seed_env).get("PYTHONHASHSEED"),
              "zygote": res.zygote, "pairs_mode": "lockstep" if res.lockstep else "sequential",
              "ab_threshold": config.ab_threshold, "ab_margin": config.ab_margin,
              "budget_s": budget, "setup_s": setup_s, "pair_walls_s": list(run.pair_walls),
              "elapsed_s": elapsed, "stopped": stop_reason, "interrupted": stop_reason == "interrupted",
              "pairs": pairs, "verdicts": rows, "operators": operators}
    if out_dir is not None:
        (out_dir / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if stop_reason == "interrupted":
        kept = [str(p) for p in (args.json, out_dir and out_dir / "pairs.jsonl") if p]
        print(f"perfsuite ab: interrupted after {n_pairs} pair(s) per cell; the table above is what they show"
              + (f"; wrote {', '.join(kept)}" if kept else " (pass --json FILE to keep them)"), file=sys.stderr)
        return 130
    if any(r["verdict"] == "regression" for r in rows):
        return 1
    if args.fail_on_inconclusive and any(r["verdict"] == "inconclusive" for r in rows):
        return 3
    return 0


def _runner_class(device: str) -> str | None:
    from perfsuite.machine import runner_class

    try:
        return runner_class.detect(device)[0]
    except Exception:  # a class is context for the history; an A/B needs none
        return None


def _side_facts(side: Any) -> dict[str, Any]:
    from perfsuite.machine.external import run_tool

    git = run_tool(["git", "-C", str(side.tree), "rev-parse", "HEAD"], 10)
    commit = git.stdout.strip() or None if git.ok else None
    return {"tree": str(side.tree), "python": side.python, "commit": commit}


def _table(rows: list[dict[str, Any]]) -> list[str]:
    from perfsuite.verdict.report import aligned

    lines = [("cell", "test", "metric", "verdict", "change", "interval", "pairs", "note")]
    for r in rows:
        ch = "n/a" if r["change"] is None else f"{r['change'] * 100:+.2f}%"
        verdict = r["verdict"].upper() if r["verdict"] == "regression" else r["verdict"]
        lines.append((r["cell"], r["test"].split("[")[0], r["metric"], verdict, ch,
                      f"[{r['ci_low'] * 100:+.2f}%, {r['ci_high'] * 100:+.2f}%]", str(r["pairs"]), r["note"]))
    return aligned(lines)
