"""``perfsuite calibrate``: how noisy is THIS machine, and what can the gate see on it?

Measures the selected cells the way a perf run does (fresh worker processes from this tree), ``--runs`` times,
optionally ``--gap`` apart, and splits the noise of each gated metric into its levels (log scale, as CV):

* within a process: spread of one process's generations (what longer runs reduce; hardly what matters)
* between processes: spread of process values inside a run (what more worker processes reduce)
* between runs: what is left of the spread of run values beyond the processes' share (drift over time:
  neighbours, frequency, a VM moved); only stored baselines see it, an interleaved A/B cancels it

and turns them into what each verdict can detect here: the minimum detectable effect of
``pytest --benchmark-compare`` against ``baseline_runs`` stored runs, and the pairs (and minutes) ``perfsuite ab``
needs to decide a 5 % and a 2 % slowdown. ``ab``'s pairs run in lockstep (perfsuite.measure.lockstep: both workers alive,
taking turns), which cancels drift the between-process spread of one-after-the-other processes includes, so each run
also measures ``--pairs`` A/A lockstep pairs of this tree and predicts ``ab`` from their spread of log(B/A); with
``--pairs 0`` (and for serving cells, whose pairs are sequential) the prediction is sqrt(2) x the between-process
spread. The pairs run at ``ab``'s thread choice (``--threads``, perfsuite.machine.cotenant).

  perfsuite calibrate --runs 5 --backend torch --gap 60s --json calib.json
  perfsuite calibrate --profile pr --cells 'vllm-serve-*' --runs 3 --workers 2   # serving: a start per replicate
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.adapters.cli._common import Progress, add_command, check_locations, parse_duration, thread_mode
from perfsuite.facts.errors import UsageError


def register(sub: Any) -> None:
    p = add_command(sub, "calibrate",
                    "noise of this machine by level, and what the gate and ab can detect", __doc__, main)
    p.add_argument("--runs", type=int, default=5, help="independent runs (default 5; >= 2)")
    p.add_argument("--workers", type=int, default=None, help="processes per cell and run (default: the profile's)")
    p.add_argument("--pairs", type=int, default=4, help="A/A lockstep pairs per cell and run, as ab measures them; "
                   "their spread predicts ab's pairs (default 4; 0: predict from the between-process spread)")
    p.add_argument("--threads", type=thread_mode, default="auto", metavar="auto|cell|N",
                   help="OpenMP threads of the A/A pairs, chosen as perfsuite ab chooses them (default auto: one "
                   "each on a 2-core machine or the free cores beside a co-tenant), so the prediction is ab's; the "
                   "runs' processes keep each cell's default, as pytest measures")
    p.add_argument("--gap", default="0s", help="pause between runs, e.g. 60s, to see drift over time")
    p.add_argument("--profile", default="smoke")
    p.add_argument("--backend", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--cells", default="*", help="glob on cell ids")
    p.add_argument("--config", type=Path, default=None, help="pyproject.toml with [tool.perfsuite.gate]")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", type=Path, default=None, help="write the decomposition here")


def main(args: argparse.Namespace) -> int:
    from perfsuite.adapters.cli._common import measuring, usage_errors  # (here: the module line would not fit)
    from perfsuite.facts.cells import cell_from_dict
    from perfsuite.measure.worker import pool
    from perfsuite.orchestrate import serving_calibrate as serve_calibrate
    from perfsuite.verdict.policy import PolicyError, load_config

    check_locations((args.json, "--json", "file"), cache=True)
    if args.runs < 2:
        raise UsageError("--runs must be >= 2 (between-run noise needs two runs)")
    if args.pairs < 0:
        raise UsageError(f"--pairs must be >= 0 (A/A lockstep pairs per cell and run), not {args.pairs}")
    gap = parse_duration(args.gap, "--gap") if args.gap not in ("0", "0s") else 0.0
    with usage_errors(PolicyError):
        config = load_config(args.config)
    side = pool.this_side()
    plan_args = {"profile": args.profile, "backend": args.backend, "model": args.model, "device": "cpu",
                 "cells": args.cells}
    with usage_errors(pool.SideError):
        plan = pool.plan(side, plan_args)
    serve_conf, serving = serve_calibrate.select(args.profile, plan_args, side.tree)
    if not plan["cells"] and not serving:
        raise UsageError("no cell selected; check --profile/--backend/--model/--cells (serving cells: --cells "
                         "'vllm-serve-*')")
    cells = [cell_from_dict(c) for c in plan["cells"]]
    with measuring("calibrate"):
        return _measure(args, config, side, plan, cells, serve_conf, serving, gap)


def _measure(args: argparse.Namespace, config: Any, side: Any, plan: dict[str, Any], cells: list[Any],
             serve_conf: Any, serving: Any, gap: float) -> int:
    """The measured part, under the suite lock."""
    from perfsuite.facts.vocabulary import TIMED as METRICS
    from perfsuite.machine import cotenant
    from perfsuite.measure import scheduler
    from perfsuite.measure.worker import pool
    from perfsuite.orchestrate import serving_calibrate as serve_calibrate
    from perfsuite.verdict.noise import decompose, format_report

    workers = args.workers or 10
    serve_rep = None
    if serving:  # a replicate is a server start: --workers starts per run (default the profile's, at least 2)
        starts = args.workers or max(2, serve_conf.server_starts)
        vals, start_s = serve_calibrate.measure(serving, serve_conf, args.runs, starts, gap, args.seed, say=print)
        serve_rep = serve_calibrate.report(vals, config, starts, start_s, serve_conf.server_starts)
        if not cells:
            return _emit({"serving": serve_rep}, args.json, serve_calibrate.format_lines(serve_rep))
    rng = random.Random(args.seed)
    # values[cell][metric][run] = list of (process value, generation values)
    values: dict[str, dict[str, list[list[tuple[float, list[float]]]]]] = {
        c.id: {m: [[] for _ in range(args.runs)] for m in METRICS} for c in cells}
    walls: list[float] = []
    pairs: dict[str, dict[str, list[float]]] = {c.id: {m: [] for m in METRICS} for c in cells}
    pair_walls: list[float] = []
    prog = Progress(min_interval_s=10.0)
    preload = pool.preload_modules({c.backend for c in cells})
    threads = cotenant.choose({"A": {}, "B": {}}, args.threads) if args.pairs else None
    pair_side = (dataclasses.replace(side, env=threads.env + cotenant.hash_seed_env({}, rng) + side.env)
                 if threads else side)  # the pairs' workers as ab's: its threads, one hash seed, one zygote
    if threads:
        print(f"perfsuite calibrate: A/A pairs: {threads.line}", flush=True)
    pair_pools, _ = pool.pair_pools({"a": pair_side, "b": pair_side}, {}, preload)
    with pool.Pool(side, preload=preload) as workers_pool, pair_pools["a"] as pair_a, pair_pools["b"] as twin:
        for r in range(args.runs):
            if r and gap:
                time.sleep(gap)
            jobs = [scheduler.Job(c, METRICS, plan["generations"], plan["warmup_generations"], index=i)
                    for c in cells for i in range(workers)]

            def collect(k: int, total: int, job: scheduler.Job, pr: Any, r: int = r) -> None:
                _check(job, pr)
                walls.append(pr.wall_s)
                for m in METRICS:
                    gen = pr.metrics[m].samples[f"{m}_ms"]
                    values[job.cell.id][m][r].append((float(np.median(gen)), list(gen)))
                prog.update(f"run {r + 1}/{args.runs}, process {k}/{total}")

            scheduler.run(workers_pool, jobs, rng, progress=collect)
            for k in range(args.pairs):
                for c in cells:
                    pj = {s: scheduler.Job(c, METRICS, plan["generations"], plan["warmup_generations"], index=k,
                                           label=s.upper()) for s in ("a", "b")}
                    res = scheduler.measure_pair({"a": pair_a, "b": twin}, pj, rng).results
                    for s in ("a", "b"):
                        _check(pj[s], res[s])
                    pair_walls.append(max(res["a"].wall_s, res["b"].wall_s))
                    for m in METRICS:
                        pairs[c.id][m].append(math.log(float(np.median(res["b"].metrics[m].samples[f"{m}_ms"])) /
                                                       float(np.median(res["a"].metrics[m].samples[f"{m}_ms"]))))
                    prog.update(f"run {r + 1}/{args.runs}, A/A lockstep pair {k + 1}/{args.pairs} of {c.id}")
    prog.done()
    report = decompose(values, config, workers, float(np.mean(walls)),
                       pairs=pairs if args.pairs else None, pair_wall_s=float(np.mean(pair_walls or [math.nan])))
    if threads:
        report["pair_threads"] = threads.as_dict()
    lines = format_report(report)
    if serve_rep is not None:
        report["serving"] = serve_rep
        lines += serve_calibrate.format_lines(serve_rep)
    return _emit(report, args.json, lines)


def _check(job: Any, pr: Any) -> None:
    if pr.skip or pr.error:
        raise UsageError(f"{job.cell.id}: {pr.skip or pr.error}")


def _emit(report: dict[str, Any], path: Path | None, lines: list[str]) -> int:
    for line in lines:
        print(line)
    if path:
        path.write_text(json.dumps(report, indent=1))
    return 0
