"""The client's dispatch delay of the pr profile's serving cells, two trees alternated (A B A B ...).

Each run is ``pytest tests/perf/test_serving.py --perf-profile pr`` in one tree, in a fresh process with that tree on
PYTHONPATH: a server start, then the profile's load points. From each run's benchmark JSON it keeps, per load point,
the p99 and the maximum dispatch delay (scheduled send time until the request is handed to the HTTP client) and the
client's CPU share. Used to measure the load generator's own lateness with and without a change, e.g.:

  git worktree add --detach /tmp/before HEAD~1
  python benchmarks/serve_dispatch.py --tree before=/tmp/before --tree after=. --rounds 3 \
      --json benchmarks/data/serve_dispatch_YYYYMMDD.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def one_run(tree: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "tests/perf/test_serving.py", "--perf-profile", "pr",
                               "-m", "", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                               f"--benchmark-json={out}"], cwd=tree, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        data = json.loads(out.read_text()) if out.exists() else {"benchmarks": []}
    points = {}
    for b in data["benchmarks"]:
        info = b.get("extra_info") or {}
        if info.get("metric") != "ttft":  # one test per point carries the point's client figures
            continue
        per_start = [p["metrics"] for p in info.get("processes", [])]
        points[info["cell"]["id"]] = {
            "p99_dispatch_delay_ms": info.get("p99_dispatch_delay_ms"),
            "max_dispatch_delay_ms": max((m.get("max_dispatch_delay_ms", 0.0) for m in per_start), default=None),
            "client_cpu_share": info.get("client_cpu_share"),
            "median_ttft_ms": info.get("median_ttft_ms"),
        }
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
    return {"rc": proc.returncode, "wall_s": round(wall, 1), "points": points, "finished": time.time(),
            "summary": tail[0][:200]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", required=True, metavar="LABEL=PATH", help="a checkout (repeatable)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, required=True)
    args = p.parse_args()
    trees = [(label, Path(path).resolve()) for label, path in (t.split("=", 1) for t in args.tree)]
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for label, tree in order:
            res = {"tree": label, "round": r, **one_run(tree)}
            runs.append(res)
            pts = "; ".join(f"{cid.rsplit('-', 2)[-2]}: p99 {v['p99_dispatch_delay_ms']:.2f} ms, max "
                            f"{v['max_dispatch_delay_ms']:.2f} ms" for cid, v in res["points"].items())
            print(f"round {r + 1} {label}: rc {res['rc']} {res['wall_s']} s; {pts or res['summary']}", flush=True)
            args.json.write_text(json.dumps({"trees": {k: str(v) for k, v in trees}, "runs": runs}, indent=1))


if __name__ == "__main__":
    from perfsuite.machine.signals import stoppable  # kill -INT / -TERM end it with its server and clients

    with stoppable():
        main()
