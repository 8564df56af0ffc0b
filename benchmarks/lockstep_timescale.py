"""On what time scale does this machine drift? One process, the smoke profile's torch tiny-llama cell, many
generations back to back with their start times; then, on those data, the spread of log(B/A) of an A/A "pair"
when its 5 + 5 generations are one block after the other (a sequential pair) or alternate (a lockstep pair).

  python benchmarks/lockstep_timescale.py measure --gens 600 --json OUT.json   # ~2.5 min in the VM's slow state
  python benchmarks/lockstep_timescale.py analyse OUT.json

Both halves of a "pair" come from one process here, so per-process effects are absent: this isolates the drift
between the two halves' time windows, which is what lockstep pairs (perfsuite/measure/lockstep.py) cancel.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def measure(gens: int, out: Path) -> None:
    from perfsuite.facts import models
    from perfsuite.measure import loop as m
    from perfsuite.measure.backends import create
    from perfsuite.measure.worker.job import cell_from_dict

    raw = subprocess.check_output([sys.executable, "-m", "perfsuite.measure.worker", "plan",
                                   json.dumps({"profile": "smoke", "backend": "torch"})], text=True)
    cell = cell_from_dict(json.loads(raw.strip().splitlines()[-1])["cells"][0])
    res = models.resolve(cell.model, None)
    cell = dataclasses.replace(cell, model_dir=res.path)
    backend = create(cell, None)
    backend.load()
    sc = cell.scenario
    prompts = models.prompts(sc.batch_size, sc.prompt_tokens, res.vocab_size, cell.seed)
    for _ in range(3):
        m.generate(backend, prompts, sc.new_tokens)
    t, tpot = [], []
    for _ in range(gens):
        t0 = time.perf_counter()
        g = m.generate(backend, prompts, sc.new_tokens)
        t.append(t0)
        tpot.append(sum(g.step_s) / len(g.step_s) * 1e3)
    backend.close()
    out.write_text(json.dumps({"cell": cell.id, "t": t, "tpot_ms": tpot}))
    analyse(out)


def analyse(path: Path, k: int = 5) -> None:
    d = json.loads(path.read_text())
    tp = np.asarray(d["tpot_ms"])
    lt = np.log(tp)
    n = tp.size
    print(f"{n} generations in {d['t'][-1] - d['t'][0]:.1f} s; TPOT median {np.median(tp):.3f} ms "
          f"(p10 {np.percentile(tp, 10):.3f}, p90 {np.percentile(tp, 90):.3f}); SD of log TPOT {lt.std():.3f}")
    print("autocorrelation of log TPOT: " + ", ".join(
        f"lag {lag} {np.corrcoef(lt[:-lag], lt[lag:])[0, 1]:+.2f}" for lag in (1, 2, 5, 10, 20, 50)))
    seq, alt = [], []
    for s in range(0, n - 2 * k + 1, 2 * k):
        blk = tp[s:s + 2 * k]
        seq.append(math.log(np.median(blk[k:]) / np.median(blk[:k])))
        alt.append(math.log(np.median(blk[1::2]) / np.median(blk[0::2])))
    print(f"A/A pairs of {k} + {k} generations (n = {len(seq)}): SD of log(B/A) one block after the other "
          f"{np.std(seq):.4f}, alternating {np.std(alt):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("measure")
    p.add_argument("--gens", type=int, default=600)
    p.add_argument("--json", type=Path, required=True)
    p = sub.add_parser("analyse")
    p.add_argument("json", type=Path)
    a = ap.parse_args()
    if a.cmd == "measure":
        measure(a.gens, a.json)
    else:
        analyse(a.json)


if __name__ == "__main__":
    main()
