"""Noise of the pr serving cells across server starts (a start is the serving cells' replicate) and what the gate
and `perfsuite ab` can detect with it: ``perfsuite calibrate``'s figures for serving cells, computed the same way
(log scale; gate MDE for the pr setup of one start per run against ``baseline_runs`` stored runs).

    python benchmarks/serve_noise.py --starts 4 --json benchmarks/data/serve_noise.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np

from perfsuite import config as cfg
from perfsuite import gate
from perfsuite.gate import sequential, stats
from perfsuite.serve import cell as sc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=4)
    ap.add_argument("--profile", default="pr")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    root = Path(__file__).parents[1]
    conf = dataclasses.replace(sc.load(root / "pyproject.toml", a.profile), server_starts=a.starts)
    gconf = gate.parse_config(cfg.load(root / "pyproject.toml", root).gate)
    runs = sc.measure(list(conf.cells), conf, None, seed=0, say=print)
    out: dict = {"starts": a.starts, "cells": {}}
    n_tests = 3 * len(runs)
    for cid, r in runs.items():
        if r.error:
            out["cells"][cid] = {"error": r.error}
            continue
        out["cells"][cid] = {}
        for m in ("ttft", "tpot", "e2el"):
            per = [rep.result["samples"][f"{m}_ms"] for rep in r.replicates]
            med = np.log([np.median(x) for x in per])
            s_start = float(med.std(ddof=1))
            within = float(np.median([np.std(np.log(np.maximum(x, 1e-6)), ddof=1) for x in per]))
            thr = math.log1p(next((p.threshold for p in gconf.policies if p.metric == f"median_{m}_ms"), 0.03))
            k = gconf.baseline_runs
            se = s_start * math.sqrt(1 + 1 / k)
            mde = stats.mde(se, k - 1, gconf.alpha / n_tests, gconf.power, thr)
            tau, eps = math.log1p(gconf.ab_threshold), math.log1p(gconf.ab_margin)
            ab = {f"{p:.0%}": sequential.pairs_needed(math.sqrt(2) * s_start, math.log1p(p), gconf.alpha / 3, tau,
                                                       eps) for p in (0.05, 0.2)}
            out["cells"][cid][m] = {"median_ms_per_start": [float(np.exp(v)) for v in med],
                                    "cv_between_starts": math.expm1(s_start), "cv_within_start": math.expm1(within),
                                    "gate_mde_1_start_per_run": math.expm1(mde), "ab_pairs_80pct": ab}
            print(cid, m, json.dumps(out["cells"][cid][m]), flush=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
