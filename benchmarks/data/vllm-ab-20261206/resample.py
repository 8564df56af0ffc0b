"""Resample the A/A vLLM lockstep pairs of this folder (and ../vllm-lockstep-20261206/aa-frozen*.json): draw 5 pairs
at a time, run the few-pairs rule of perfsuite ab and the confirmation on them, and count how often unchanged code is
called a regression (ab: lower end > 0 and estimate > 1 %; confirmation: the same with the metric's threshold), ended
unchanged (ab, equivalence inside +-2 %) and refuted (confirmation's first stage, t bound below the threshold).

    python benchmarks/data/vllm-ab-20261206/resample.py benchmarks/data/vllm-ab-20261206/SERIES > …/SERIES/resample.txt
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from perfsuite.verdict import confirm_decision as decision
from perfsuite.verdict import sequential as seq

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "gens30"
FILES = sorted(HERE.glob("aa-*.json"))
METRICS = {"ttft:median_ttft_ms": 0.05, "tpot:median_tpot_ms": 0.03, "e2el:median_e2el_ms": 0.03}
ALPHA = 0.01 / 3  # the gate's alpha over the cell's three metrics
DRAWS = 20_000


def main() -> None:
    pairs: dict[str, list[float]] = {m: [] for m in METRICS}
    for f in FILES:
        for p in json.loads(f.read_text())["pairs"]:
            for m in METRICS:
                v = p["values"][m]
                pairs[m].append(math.log(v["B"] / v["A"]))
    print(f"{len(pairs['tpot:median_tpot_ms'])} A/A pairs from {len(FILES)} runs; {DRAWS} draws of 5 (with replacement)")
    rng = np.random.default_rng(0)
    for m, thr in METRICS.items():
        d = np.asarray(pairs[m])
        reg_ab = unch_ab = reg_conf = refuted = 0
        for _ in range(DRAWS):
            x = rng.choice(d, 5, replace=True)
            cs = seq.ConfidenceSequence(ALPHA, looks=seq.FEW_LOOKS)
            ab_done = conf_done = False
            for v in x:
                cs.update(float(v))
                dec = seq.decide(cs, math.log1p(0.01), math.log1p(0.02))
                if not ab_done:
                    if dec.kind == "regression":
                        reg_ab += 1
                        ab_done = True
                    elif decision.equivalent(cs.data, math.log1p(0.02)) is not None:
                        unch_ab += 1
                        ab_done = True
                if not conf_done:
                    lo, hi = cs.interval()
                    kind, _ = decision.settle(lo, hi, cs.estimate(), math.log1p(thr), cs.data, True, few=True)
                    if kind != "open":
                        reg_conf += kind == "confirmed"
                        refuted += kind == "refuted"
                        conf_done = True
        print(f"{m}: pair SD {np.std(d, ddof=1) * 100:.2f} %, robust {seq.robust_sd(list(d)) * 100:.2f} %; "
              f"ab: regression {reg_ab / DRAWS:.4%}, unchanged {unch_ab / DRAWS:.1%}; "
              f"confirmation at {thr:.0%}: confirmed {reg_conf / DRAWS:.4%}, refuted {refuted / DRAWS:.1%}")


if __name__ == "__main__":
    main()
