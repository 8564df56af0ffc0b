"""Collect a corpus of process runs for the gate evaluation (run ONCE; evaluate offline with gate_eval.py).

A/A runs (no injection) and runs with an injected per-decode-step slowdown of 5 % and 10 %, interleaved in a
random (seeded) order so that drift of the shared machine spreads over all three groups.

    python benchmarks/gate_collect.py --out benchmarks/data/gate_corpus --aa 18 --inj05 12 --inj10 12
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from perfsuite.gate.runner import INJECT_ENV, Env, run_once

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "data" / "gate_corpus")
    ap.add_argument("--aa", type=int, default=18)
    ap.add_argument("--inj05", type=int, default=12)
    ap.add_argument("--inj10", type=int, default=12)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--budget-s", type=float, default=20 * 60, help="stop starting runs after this long")
    ap.add_argument("pytest_args", nargs="*", default=["-k", "torch-tiny-llama", "--perf-backend=torch"])
    a = ap.parse_args()
    plan = ["aa"] * a.aa + ["inj05"] * a.inj05 + ["inj10"] * a.inj10
    random.Random(a.seed).shuffle(plan)
    a.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    log = []
    for i, label in enumerate(plan, 1):
        if time.time() - start > a.budget_s:
            print(f"budget spent after {i - 1} runs", flush=True)
            break
        frac = {"aa": "0", "inj05": "0.05", "inj10": "0.10"}[label]
        env = Env(label, python=sys.executable, env=((INJECT_ENV, frac),))
        path = a.out / f"{i:04d}_{label}.json"
        rc, wall, tail = run_once(env, path, list(a.pytest_args), ROOT)
        log.append({"i": i, "label": label, "rc": rc, "wall_s": round(wall, 1), "t": time.time()})
        print(f"{i:3d}/{len(plan)} {label:6s} rc={rc} {wall:5.1f}s", flush=True)
        if rc != 0:
            print(tail, flush=True)
    (a.out / "collect_log.json").write_text(json.dumps(log, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
