"""The vLLM A/B trials of this folder (run.sh) as a table, with Clopper-Pearson intervals:

    python benchmarks/data/vllm-ab-20261206/report.py benchmarks/data/vllm-ab-20261206/SERIES > …/SERIES/report.md

Per trial: `perfsuite ab`'s verdicts (its own rule: regression beyond 1 %, unchanged inside +-2 %) and its wall time;
then the confirmation's rule replayed on the same pairs with perfsuite's own functions (what an in-session
confirmation at the gate's thresholds, TTFT 5 %, TPOT and E2EL 3 %, would have decided after each pair: confirmed,
refuted by the first stage, or open), which is a replay, not a pytest run.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from scipy.stats import beta

from perfsuite.verdict import confirm_decision as decision
from perfsuite.verdict import sequential as seq

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "gens30"
THRESHOLDS = {"median_ttft_ms": 0.05, "median_tpot_ms": 0.03, "median_e2el_ms": 0.03}
ALPHA = 0.01 / 3


def cp(k: int, n: int) -> str:
    lo = 0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1)
    hi = 1.0 if k == n else beta.ppf(0.975, k + 1, n - k)
    return f"{k}/{n} ({lo:.1%}-{hi:.1%})"


def replay(pairs: list[dict]) -> tuple[str, int]:
    """The confirmation's decision on these pairs: 'confirmed' / 'refuted' (every metric) / 'open', and the pair."""
    kinds: dict[str, str] = {}
    css = {m: seq.ConfidenceSequence(ALPHA, looks=seq.FEW_LOOKS) for m in THRESHOLDS}
    for n, p in enumerate(pairs, 1):
        for key, v in p["values"].items():
            m = key.split(":")[1]
            if kinds.get(m, "open") != "open":
                continue
            css[m].update(math.log(v["B"] / v["A"]))
            lo, hi = css[m].interval()
            kinds[m], _ = decision.settle(lo, hi, css[m].estimate(), math.log1p(THRESHOLDS[m]), css[m].data, True,
                                          few=True)
        if any(k == "confirmed" for k in kinds.values()):
            return "confirmed", n
        if len(kinds) == len(THRESHOLDS) and all(k == "refuted" for k in kinds.values()):
            return "refuted", n
    return "open", len(pairs)


def main() -> None:
    rows = [json.loads(line) for line in (HERE / "trials.jsonl").read_text().splitlines() if line.strip()]
    print("| trial | started (UTC) | wall | ab: TTFT / TPOT / E2EL (pairs) | confirmation replay |")
    print("|---|---|---|---|---|")
    tally: dict[str, list[tuple[bool, bool, float, str]]] = {"aa": [], "spin15": []}
    for r in rows:
        data = json.loads((HERE / f"{r['trial']}.json").read_text())
        kinds = {v["metric"]: (v["verdict"], v["pairs"], v["change"]) for v in data["verdicts"]}
        cells = " / ".join(f"{k[0]} {100 * (k[2] or 0):+.1f} %" for k in kinds.values())
        n = max(k[1] for k in kinds.values())
        rep, at = replay(data["pairs"])
        print(f"| {r['trial']} | {r['started'][11:19]} | {r['wall_s']:.0f} s | {cells} ({n}) | {rep} at pair {at} |")
        kind = r["trial"].rsplit("-", 1)[0]
        reg = any(k[0] == "regression" for k in kinds.values())
        decided = all(k[0] != "inconclusive" for k in kinds.values()) if kind == "aa" else reg
        tally[kind].append((reg, decided, r["wall_s"], rep))
    print()
    aa, sp = tally["aa"], tally["spin15"]
    if sp:
        print(f"- +15 % (vspin15): ab says regression in {cp(sum(t[0] for t in sp), len(sp))}, within 3 min (wall "
              f"incl. setup <= 180 s) in {cp(sum(t[0] and t[2] <= 180 for t in sp), len(sp))}; confirmation replay "
              f"confirmed in {cp(sum(t[3] == 'confirmed' for t in sp), len(sp))}")
    if aa:
        print(f"- unchanged (A/A): ab false alarm {cp(sum(t[0] for t in aa), len(aa))}; every metric decided "
              f"(unchanged) by ab in {cp(sum(t[1] for t in aa), len(aa))}; confirmation replay: confirmed (false "
              f"alarm) {cp(sum(t[3] == 'confirmed' for t in aa), len(aa))}, refuted in "
              f"{cp(sum(t[3] == 'refuted' for t in aa), len(aa))}")
    walls = sorted(t[2] for t in aa + sp)
    print(f"- wall per trial: {walls[0]:.0f}-{walls[-1]:.0f} s")


if __name__ == "__main__":
    main()
