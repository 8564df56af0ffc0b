"""Evaluate the gate vs pytest-benchmark's ``--benchmark-compare-fail=median:5%`` on a corpus of process runs
collected ONCE by benchmarks/gate_collect.py (A/A runs and runs with an injected 5 % / 10 % decode slowdown).

    python benchmarks/gate_eval.py benchmarks/data/gate_corpus [--baseline-runs 5] [--draws 10]

Prints, per gate configuration: A/A false alarms (a false alarm = any gated metric of the run regressed, Holm
over the family), detection rate of each injection on test_tpot, the median MDE, and pytest-benchmark's figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfsuite.gate import load, parse_config
from perfsuite.gate.evaluate import evaluate

CONFIGS = {
    # the shipped defaults: run medians of per-generation values
    "default (median_*; tpot/e2el 3 %, ttft 5 %)": {},
    "median_*, threshold 0 (significance only)": {"policies": [
        {"metric": "median_tpot_ms", "threshold": 0.0, "tests": ["test_tpot*"]},
        {"metric": "median_ttft_ms", "threshold": 0.0, "tests": ["test_ttft*"]},
        {"metric": "median_e2el_ms", "threshold": 0.0, "tests": ["test_e2e*"]},
        {"metric": "generated_tokens", "exact": True}]},
    "robust: min_itl_ms (tpot) / min_ttft_ms / min_e2el_ms, 3 %": {"policies": [
        {"metric": "min_itl_ms", "threshold": 0.03, "tests": ["test_tpot*"]},
        {"metric": "min_ttft_ms", "threshold": 0.03, "tests": ["test_ttft*"]},
        {"metric": "min_e2el_ms", "threshold": 0.03, "tests": ["test_e2e*"]},
        {"metric": "generated_tokens", "exact": True}]},
    "robust: p10_itl_ms (tpot) / min_ttft_ms / min_e2el_ms, 3 %": {"policies": [
        {"metric": "p10_itl_ms", "threshold": 0.03, "tests": ["test_tpot*"]},
        {"metric": "min_ttft_ms", "threshold": 0.03, "tests": ["test_ttft*"]},
        {"metric": "min_e2el_ms", "threshold": 0.03, "tests": ["test_e2e*"]},
        {"metric": "generated_tokens", "exact": True}]},
}


def simulate(sigma_b: float, sigma_w: float, n_gen: int, n: int, alpha: float, seed: int = 0) -> None:
    """Operating characteristics at a stated noise level (synthetic runs; NOT a measurement of this machine).

    Run r's per-generation values: 3.4 ms * exp(shift + b_r + e_rg), b_r ~ N(0, sigma_b) (process effect),
    e_rg ~ N(0, sigma_w). One metric at the Bonferroni share alpha/3 (three gated metrics per cell)."""
    import math

    import numpy as np

    from perfsuite.gate.policy import Policy
    from perfsuite.gate.verdict import decide, estimate_cell

    rng = np.random.default_rng(seed)
    a1 = alpha / 3
    pol = Policy("median_tpot_ms", threshold=0.03)
    cfg = parse_config({"alpha": alpha, "baseline_runs": 1000})

    def run(shift: float) -> dict:
        g = list(3.4 * np.exp(shift + rng.normal(0, sigma_b) + rng.normal(0, sigma_w, n_gen)))
        return {"extra_info": {"samples": {"tpot_ms": g}}, "stats": {}}

    print(f"simulation: between-run SD {sigma_b:.1%}, within-run SD {sigma_w:.1%}, {n_gen} generations/run, "
          f"{n} comparisons per cell, alpha {alpha:g} family (per metric {a1:.2g}), threshold 3 %")
    designs = [("gate R=5  C=1", 5, 1, 0), ("gate R=10 C=1", 10, 1, 0), ("gate R=10 C=3", 10, 3, 0),
               ("gate R=10 C=5", 10, 5, 0), ("ab k=6 pairs", 0, 0, 6), ("ab k=10 pairs", 0, 0, 10)]
    for shift in (0.0, math.log(1.05), math.log(1.10)):
        row = []
        for label, r, c, k in designs:
            hits = 0
            for _ in range(n):
                if k:
                    a_runs = [run(0.0) for _ in range(k)]
                    b_runs = [run(shift) for _ in range(k)]
                    cell = estimate_cell("t", pol, a_runs, b_runs, cfg, paired=True)
                else:
                    cell = estimate_cell("t", pol, [run(0.0) for _ in range(r)], [run(shift) for _ in range(c)],
                                         cfg)
                hits += decide(cell, a1, 0.8).failed
            row.append(f"{label}: {100 * hits / n:5.1f}%")
        # pytest-benchmark median:5%: one run vs one run
        pb = sum(float(np.median(run(shift)["extra_info"]["samples"]["tpot_ms"]))
                 / float(np.median(run(0.0)["extra_info"]["samples"]["tpot_ms"])) > 1.05 for _ in range(n))
        row.append(f"pytest-benchmark median:5%: {100 * pb / n:5.1f}%")
        print(f"  true change {math.expm1(shift):+.0%} -> fail rate  " + " | ".join(row))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", type=Path, nargs="?")
    ap.add_argument("--simulate", default=None, metavar="SIGMA_B,SIGMA_W",
                    help="instead of a corpus: synthetic runs at this between/within-run SD, e.g. 0.02,0.015")
    ap.add_argument("--sim-n", type=int, default=1000)
    ap.add_argument("--baseline-runs", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--only", default=None, help="substring of a configuration name")
    a = ap.parse_args()
    if a.simulate:
        sb, sw = (float(x) for x in a.simulate.split(","))
        simulate(sb, sw, 5, a.sim_n, a.alpha)
        return 0
    runs = load.load_runs(a.corpus)
    for name, raw in CONFIGS.items():
        if a.only and a.only not in name:
            continue
        cfg = parse_config({**raw, "alpha": a.alpha, "baseline_runs": a.baseline_runs})
        print(f"=== gate: {name}; alpha={a.alpha:g}, baseline_runs={a.baseline_runs}, draws={a.draws}")
        for line in evaluate(runs, cfg, draws=a.draws, seed=0).lines():
            print(line)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
