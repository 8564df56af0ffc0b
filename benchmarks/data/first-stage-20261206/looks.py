"""Resample the per-pair log(B/A) of A/A runs (each metric centred on 0, then shifted) through the confirmation's
first stage (perfsuite.verdict.confirm_decision.first_stage): how often all three metrics are refuted, at which look,
and how often a slowdown at the threshold is refuted.

Usage: python looks.py 12,20 aa1.json aa2.json
"""

import json
import math
import random
import statistics
import sys

from perfsuite.verdict.confirm_decision import first_stage

TAUS = {"median_ttft_ms": math.log1p(0.05), "median_tpot_ms": math.log1p(0.03), "median_e2el_ms": math.log1p(0.03)}
TRIALS = 4000


def rows(x):
    if isinstance(x, dict):
        if "a_values" in x:
            yield x
        for v in x.values():
            yield from rows(v)
    elif isinstance(x, list):
        for v in x:
            yield from rows(v)


def main() -> None:
    looks = tuple(int(x) for x in sys.argv[1].split(","))
    pairs: dict[str, list[float]] = {}
    for path in sys.argv[2:]:
        for r in rows(json.load(open(path))):
            pairs.setdefault(r["metric"], []).extend(math.log(b / a) for a, b in zip(r["a_values"], r["b_values"]))
    centred = {m: [x - statistics.fmean(v) for x in v] for m, v in pairs.items()}
    n = len(centred["median_tpot_ms"])
    rng = random.Random(1)
    for shift in (0.0, 0.03, 0.05, 0.10):
        stops, per = [], dict.fromkeys(TAUS, 0)
        for _ in range(TRIALS):
            idx = [rng.randrange(n) for _ in range(max(looks))]
            done: dict[str, int] = {}
            for k in looks:
                for m, tau in TAUS.items():
                    if m not in done and first_stage([centred[m][i] + shift for i in idx[:k]], tau, looks):
                        done[m] = k
            for m in done:
                per[m] += 1
            stops.append(max(done.values()) if len(done) == len(TAUS) else None)
        at = ", ".join(f"{k}:{sum(s == k for s in stops) / TRIALS:.2f}" for k in looks)
        print(f"looks {looks} shift {shift:+.2f}: all 3 refuted {sum(s is not None for s in stops) / TRIALS:.3f}; "
              "per metric " + ", ".join(f"{m.split('_')[1]} {c / TRIALS:.3f}" for m, c in per.items())
              + f"; stop at {at}")


if __name__ == "__main__":
    main()
