"""Is a worker's speed a property of the zygote it was forked from?

Every worker of one side of a ``perfsuite ab`` (and of one pytest session) is a fork of that side's one zygote, so
all of them share its address-space layout (ASLR draws it once per zygote). If layout moves TPOT, two zygotes of the
*same* tree differ by a fixed amount for the whole run, and an A/A comparison reads that as a difference that more
pairs only make more significant.

This starts ``--zygotes`` pools of this tree and measures ``--workers`` processes from each, interleaved in rounds
(one worker per zygote per round, the order a coin flip), one at a time. It reports a one-way ANOVA of log TPOT on
the zygote, the spread between zygotes against the spread within them, and a permutation p-value.

  python benchmarks/zygote_effect.py --zygotes 6 --workers 8 --json zyg.json
  python benchmarks/zygote_effect.py --blocks 10 --pairs 15 --threads 1 --json blocks.json   # as ab's pairs
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
from scipy import stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zygotes", type=int, default=6)
    p.add_argument("--workers", type=int, default=8, help="processes per zygote")
    p.add_argument("--backend", default="torch")
    p.add_argument("--threads", default=None, help="OMP_NUM_THREADS of every worker (default: the cell's own)")
    p.add_argument("--blocks", type=int, default=0, help="instead: this many blocks of lockstep A/A pairs, each "
                   "block between two fresh zygotes of this tree (as one perfsuite ab run)")
    p.add_argument("--pairs", type=int, default=15, help="lockstep pairs per block")
    p.add_argument("--hashseed", default=None, help="PYTHONHASHSEED of every zygote (default: Python's random one)")
    p.add_argument("--fixed-layout", action="store_true", help="zygotes without ASLR (perfsuite.measure.worker.layout)")
    p.add_argument("--shared", action="store_true", help="blocks: one zygote for both sides of every pair "
                   "(perfsuite.measure.worker.pool.pair_pools, as ab's default), fresh per block")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, required=True)
    args = p.parse_args()

    from perfsuite.facts.cells import cell_from_dict
    from perfsuite.facts.vocabulary import TIMED as METRICS
    from perfsuite.measure import scheduler
    from perfsuite.measure.worker import pool

    side = pool.this_side()
    env = ((("OMP_NUM_THREADS", str(args.threads)),) if args.threads else ()) + \
        ((("PYTHONHASHSEED", str(args.hashseed)),) if args.hashseed is not None else ())
    side = pool.Side(side.tree, side.python, side.label, env, fixed_layout=args.fixed_layout)
    plan = pool.plan(side, {"profile": "smoke", "backend": args.backend, "model": None, "device": "cpu",
                            "cells": "*"})
    cell = cell_from_dict(plan["cells"][0])
    preload = pool.preload_modules({cell.backend})
    rng = random.Random(args.seed)
    if args.blocks:
        return blocks(args, side, cell, plan, preload, rng)
    pools = [pool.Pool(side, preload=preload) for _ in range(args.zygotes)]
    tpot: list[list[float]] = [[] for _ in pools]
    t0 = time.monotonic()
    try:
        for r in range(args.workers):
            order = list(range(len(pools)))
            rng.shuffle(order)
            for z in order:
                job = scheduler.Job(cell, METRICS, plan["generations"], plan["warmup_generations"], index=r)
                res = scheduler.measure(pools[z], job)
                if res.skip or res.error:
                    raise SystemExit(f"worker failed: {res.skip or res.error}")
                tpot[z].append(float(np.median(res.metrics["tpot"].samples["tpot_ms"])))
            print(f"round {r + 1}/{args.workers} done ({time.monotonic() - t0:.0f} s)", flush=True)
    finally:
        for pl in pools:
            pl.close()
    logs = [np.log(v) for v in tpot]
    f, p_anova = stats.f_oneway(*logs)
    within = math.sqrt(np.mean([np.var(x, ddof=1) for x in logs]))
    means = np.array([x.mean() for x in logs])
    # between-zygote SD of the true means: the spread of the means beyond what the within spread explains
    between = math.sqrt(max(0.0, float(np.var(means, ddof=1)) - within ** 2 / args.workers))
    perm = stats.permutation_test(logs, lambda *g: stats.f_oneway(*g).statistic, permutation_type="independent",
                                  n_resamples=2000, alternative="greater", random_state=args.seed)
    out = {"cell": cell.id, "zygotes": args.zygotes, "workers": args.workers, "threads": args.threads,
           "tpot_ms": tpot, "zygote_means_ms": [float(math.exp(m)) for m in means], "anova_F": float(f),
           "anova_p": float(p_anova), "permutation_p": float(perm.pvalue), "sd_within_log": within,
           "sd_between_log": between, "range_of_means_pct": float(math.expm1(means.max() - means.min()) * 100),
           "finished": time.time()}
    args.json.write_text(json.dumps(out, indent=1))
    print(f"{cell.id}: {args.zygotes} zygotes x {args.workers} workers; zygote means "
          f"{', '.join(f'{m:.4f}' for m in out['zygote_means_ms'])} ms (range {out['range_of_means_pct']:.2f} %); "
          f"SD within a zygote {within * 100:.2f} %, between zygotes {between * 100:.2f} %; ANOVA F={f:.2f} "
          f"p={p_anova:.3g}, permutation p={perm.pvalue:.3g}")


def blocks(args: argparse.Namespace, side: object, cell: object, plan: dict, preload: tuple[str, ...],
           rng: random.Random) -> None:
    """Lockstep A/A pairs in blocks; every block has two fresh zygotes. Pairs that are independent draws around 0
    make the block means' z (trimmed mean over its Yuen SE) ~ N(0, 1); a per-block offset inflates var(z)."""
    from perfsuite.facts.vocabulary import TIMED as METRICS
    from perfsuite.measure import scheduler
    from perfsuite.measure.worker import pool

    d_blocks: list[list[float]] = []
    t0 = time.monotonic()
    for b in range(args.blocks):
        pools, _ = pool.pair_pools({"a": side, "b": side}, {}, preload, "shared" if args.shared else "per-side")
        with pools["a"] as pa, pools["b"] as pb:
            d = []
            for k in range(args.pairs):
                jobs = {s: scheduler.Job(cell, METRICS, plan["generations"], plan["warmup_generations"], index=k,
                                         label=s.upper()) for s in ("a", "b")}
                res = scheduler.measure_pair({"a": pa, "b": pb}, jobs, rng).results
                med = {s: float(np.median(res[s].metrics["tpot"].samples["tpot_ms"])) for s in ("a", "b")}
                d.append(math.log(med["b"] / med["a"]))
        d_blocks.append(d)
        print(f"block {b + 1}/{args.blocks}: mean log(B/A) {np.mean(d):+.4f} ({time.monotonic() - t0:.0f} s)",
              flush=True)
    zs, means, ses = [], [], []
    for d in d_blocks:  # Yuen: 10 % trimmed mean, winsorized SE, t with h - 1 df, as a normal quantile
        x = stats.mstats.winsorize(np.asarray(d), (0.1, 0.1))
        se = float(np.std(x, ddof=1)) / (0.8 * math.sqrt(len(d)))
        tm = float(stats.trim_mean(d, 0.1))
        h = len(d) - 2 * int(0.1 * len(d))
        means.append(tm)
        ses.append(se)
        zs.append(float(stats.norm.ppf(stats.t.cdf(tm / se, h - 1))) if se > 0 else 0.0)
    chi2 = float(np.sum(np.square(zs)))
    within = float(np.median([np.std(d, ddof=1) for d in d_blocks]))
    kw = stats.kruskal(*[np.asarray(d) for d in d_blocks])
    tms = np.asarray(means)
    out = {"cell": getattr(cell, "id", ""), "blocks": args.blocks, "pairs": args.pairs, "threads": args.threads,
           "hashseed": args.hashseed, "fixed_layout": args.fixed_layout, "shared": args.shared, "kruskal_p": float(kw.pvalue), "sd_trimmed_means": float(np.std(tms, ddof=1)),
           "d": d_blocks, "z": zs, "block_means": means, "var_z": float(np.var(zs, ddof=1)), "chi2": chi2,
           "chi2_p": float(stats.chi2.sf(chi2, len(zs))), "sd_pair_median": within,
           "sd_block_means": float(np.std(means, ddof=1)), "finished": time.time()}
    args.json.write_text(json.dumps(out, indent=1))
    out["rms_se"] = rms = math.sqrt(float(np.mean(np.square(ses))))
    args.json.write_text(json.dumps(out, indent=1))
    print(f"{args.blocks} blocks x {args.pairs} lockstep A/A pairs, fresh zygotes per block (PYTHONHASHSEED "
          f"{args.hashseed or 'random'}, layout {'fixed' if args.fixed_layout else 'ASLR'}, {'one shared zygote' if args.shared else 'a zygote per side'}): trimmed block means {', '.join(f'{m * 100:+.2f}%' for m in means)}; their SD "
          f"{out['sd_trimmed_means'] * 100:.2f} % against {rms * 100:.2f} % from the pairs' own spread (RMS Yuen SE); "
          f"Kruskal-Wallis p = {kw.pvalue:.2g}; var(z) {out['var_z']:.2f}, sum z^2 {chi2:.1f} on {len(zs)} df, "
          f"p = {out['chi2_p']:.2g}")


if __name__ == "__main__":
    main()
