"""`perfsuite ab`'s decision rule on pairs drawn from this VM's real worker processes: false alarms and power.

A complement to the end-to-end trials of benchmarks/gate_eval.py, which cannot reach a tight interval on a 1 %
false-alarm rate in hours (0 alarms in n trials bounds the rate by about 3.7/n). Here each simulated trial is the
product's own sequential loop (one ConfidenceSequence per gated metric at alpha/3, perfsuite.verdict.sequential.decide
after every pair, stop at the first regression, when all metrics are decided, or at the pair budget), fed with pairs
whose A and B processes are drawn at random from the per-process values of the committed baseline runs (TTFT, TPOT
and E2EL of one process stay together). Drawing from runs recorded at different times puts drift between runs into
the pair noise, so pairs are noisier than the real interleaved pairs; a regression is added to B as a multiplicative
shift of TPOT and of E2EL's decode share.

  python benchmarks/ab_error_control.py --trials 2000 --pairs 55            # A/A false alarms
  python benchmarks/ab_error_control.py --trials 500 --pairs 40 --shift 0.0514
  python benchmarks/ab_error_control.py --trials 500 --pairs 120 --shift 0.0188
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfsuite.verdict import sequential as seq  # noqa: E402
from perfsuite.verdict import values  # noqa: E402
from perfsuite.verdict.stats import binomial_interval  # noqa: E402

CELL = "torch-tiny-llama-float32-b1-p64-n32"
METRICS = ("ttft", "tpot", "e2el")  # gated metrics of the cell (test_<metric>)


def process_values(folder: str) -> np.ndarray:
    """[processes, 3]: median TTFT, TPOT, E2EL of each worker process of every baseline run of the cell (the gate's
    own per-process values; the three tests of a run list the same processes in the same order)."""
    rows: list[list[float]] = []
    for path in sorted(glob.glob(f"{folder}/*.json")):
        per_metric = {}
        for b in json.loads(Path(path).read_text())["benchmarks"]:
            info = b["extra_info"]
            if info.get("cell", {}).get("id") == CELL and info.get("metric") in METRICS:
                per_metric[info["metric"]] = values.process_values(b, f"median_{info['metric']}_ms")
        cols = [per_metric.get(m) for m in METRICS]
        if all(cols) and len({len(c) for c in cols if c}) == 1:
            rows.extend(list(r) for r in zip(*cols, strict=True))
    if len(rows) < 10:
        sys.exit(f"{folder}: fewer than 10 worker processes of {CELL} with all three metrics")
    return np.asarray(rows)


def trial(rng: np.random.Generator, pool: np.ndarray, pairs: int, shift: np.ndarray, alpha: float, tau: float,
          eps: float) -> str:
    cs = [seq.ConfidenceSequence(alpha / len(METRICS)) for _ in METRICS]
    kinds = ["open"] * len(METRICS)
    for _ in range(pairs):
        a, b = pool[rng.integers(len(pool))], pool[rng.integers(len(pool))]
        d = np.log(b / a) + shift
        for c, x in zip(cs, d, strict=True):
            c.update(float(x))
        kinds = [seq.decide(c, tau, eps).kind for c in cs]
        if "regression" in kinds:
            return "regression"
        if "open" not in kinds:
            return "decided"
    return "inconclusive"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baselines", default=str(ROOT / "baselines" / "cpu-intel-xeon-amx-2c"))
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--pairs", type=int, default=55, help="pair budget per trial (2 min here: 36-58 pairs)")
    ap.add_argument("--shift", type=float, default=0.0, help="true TPOT slowdown of B (0.05 = +5 %%)")
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--threshold", type=float, default=0.01)
    ap.add_argument("--margin", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    pool = process_values(a.baselines)
    share = float(np.median(1 - pool[:, 0] / pool[:, 2]))  # decode's share of E2EL
    s = math.log1p(a.shift)
    shift = np.array([0.0, s, math.log1p(a.shift * share)])
    rng = np.random.default_rng(a.seed)
    out = [trial(rng, pool, a.pairs, shift, a.alpha, math.log1p(a.threshold), math.log1p(a.margin))
           for _ in range(a.trials)]
    k = out.count("regression")
    lo, hi = binomial_interval(k, a.trials)
    lp = np.log(pool[:, 1])
    print(f"pool: {len(pool)} worker processes from {a.baselines}; TPOT SD of log between processes "
          f"{lp.std(ddof=1):.3f}; decode share of E2EL {share:.3f}")
    print(f"B slower by {a.shift:+.2%} (TPOT), {a.pairs} pairs at most, alpha {a.alpha:g}: regression in {k}/{a.trials}"
          f" = {k / a.trials:.2%} (95 % CI {lo:.2%} .. {hi:.2%}); decided otherwise {out.count('decided')}, "
          f"inconclusive {out.count('inconclusive')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
