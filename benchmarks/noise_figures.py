"""Noise figures that the docs quote, computed from stored baseline runs (no measurement of its own).

For each benchmark (default: every ``test_tpot``/``test_ttft``/``test_e2el`` cell) of the runs in a baselines folder:

* **between processes**: inside each run, the spread of its processes' values (each process's median of its own
  samples): the SD of their logs (as %) and the range max/min - 1;
* **between runs**: the spread of the runs' values (the geometric mean of their processes): SD of the logs and range,
  with the time the runs span.

    python benchmarks/noise_figures.py baselines/cpu-intel-xeon-amx-2c --json benchmarks/data/noise-....json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
from pathlib import Path

METRIC = {"test_tpot": "tpot_ms", "test_ttft": "ttft_ms", "test_e2el": "e2el_ms"}


def figures(folder: Path) -> dict:
    runs = sorted(folder.glob("*.json"))
    per: dict[str, dict] = {}
    times = []
    for f in runs:
        data = json.loads(f.read_text())
        times.append(dt.datetime.fromisoformat(data["datetime"]))
        for b in data["benchmarks"]:
            test, _, cell = b["name"].partition("[")
            key = METRIC.get(test)
            procs = (b.get("extra_info") or {}).get("processes") or []
            vals = [statistics.median(p["samples"][key]) for p in procs if (p.get("samples") or {}).get(key)]
            if key is None or len(vals) < 2:
                continue
            logs = [math.log(v) for v in vals]
            d = per.setdefault(f"{test}[{cell}", {"within_sd_pct": [], "within_range_pct": [], "run_values": []})
            d["within_sd_pct"].append(100 * statistics.stdev(logs))
            d["within_range_pct"].append(100 * (max(vals) / min(vals) - 1))
            d["run_values"].append(math.exp(statistics.fmean(logs)))
    out = {"folder": str(folder), "runs": len(runs),
           "span_h": round((max(times) - min(times)).total_seconds() / 3600, 2) if times else None, "benchmarks": {}}
    for name, d in sorted(per.items()):
        rv = d["run_values"]
        out["benchmarks"][name] = {
            "processes_per_run_sd_pct": [round(min(d["within_sd_pct"]), 1), round(max(d["within_sd_pct"]), 1)],
            "processes_per_run_range_pct": [round(min(d["within_range_pct"]), 1), round(max(d["within_range_pct"]), 1)],
            "between_runs_sd_pct": round(100 * statistics.stdev([math.log(v) for v in rv]), 1) if len(rv) > 1 else None,
            "between_runs_range_pct": round(100 * (max(rv) / min(rv) - 1), 1), "runs": len(rv)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    res = figures(a.folder)
    text = json.dumps(res, indent=1)
    if a.json:
        a.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
