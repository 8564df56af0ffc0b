"""Per-pair noise of `perfsuite ab` at the cell's default threads against OMP_NUM_THREADS=1 on both sides.

Campaign 7 (docs/gate-evaluation.md) saw co-tenant trials, which the A/B runs at one thread per side, with about
half the per-pair spread of quiet trials at the cell's default (two threads here). This measures that directly on a
quiet machine: rounds of (default, one thread) `ab` runs in alternating order on the same two trees, each run's
per-pair TPOT log(B/A) kept.

    python benchmarks/ab_threads.py /work/geval7b --tree spin05 --rounds 4 --budget 2m --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(out: Path, tree: str, budget: str, threads1: bool) -> dict:
    env_args = ["--a-env", "OMP_NUM_THREADS=1", "--b-env", "OMP_NUM_THREADS=1"] if threads1 else []
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "ab.json"
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "perfsuite.cli", "ab", "--a", str(out / "A"), "--b",
                               str(out / tree), "--budget", budget, "--backend", "torch", "--json", str(res),
                               *env_args], cwd=out / tree, capture_output=True, text=True)
        wall = time.monotonic() - t0
        data = json.loads(res.read_text()) if res.exists() else {}
    tp = {r["metric"]: r for r in data.get("verdicts", [])}.get("median_tpot_ms", {})
    d = [math.log(b / a) for a, b in zip(tp.get("a_values") or [], tp.get("b_values") or [], strict=True)]
    mad = 1.4826 * statistics.median(abs(x - statistics.median(d)) for x in d) if len(d) > 2 else None
    return {"threads": "1" if threads1 else "cell", "rc": proc.returncode, "wall_s": wall, "pairs": len(d),
            "kind": tp.get("kind"), "change": tp.get("change"), "sd": statistics.stdev(d) if len(d) > 2 else None,
            "robust_sd": mad, "a_median_tpot_ms": statistics.median(tp["a_values"]) if d else None, "d": d,
            "finished": time.time(), "tail": "" if proc.returncode in (0, 1) else (proc.stdout + proc.stderr)[-800:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--tree", default="spin05")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--budget", default="2m")
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args()
    runs = []
    for i in range(a.rounds):
        for threads1 in ((False, True) if i % 2 == 0 else (True, False)):
            r = one(a.out, a.tree, a.budget, threads1)
            runs.append(r)
            print(f"[{len(runs)}/{2 * a.rounds}] threads={r['threads']} pairs={r['pairs']} {r['kind']} "
                  f"change={r['change']} sd={r['sd']} robust={r['robust_sd']} A tpot={r['a_median_tpot_ms']}",
                  flush=True)
            a.json.write_text(json.dumps({"tree": a.tree, "budget": a.budget, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
