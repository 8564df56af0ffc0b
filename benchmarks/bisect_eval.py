"""`perfsuite bisect` on scripted histories, through the real command, with independent trials (issue 38's table).

A history is N first-parent commits on top of gate_eval's tree A (its recorded baselines included): every commit
appends a line to docs/bisect-history.md, and commit K also applies one of gate_eval.REGRESSIONS (real code, e.g.
eager attention), which stays in every later commit. A trial runs `perfsuite bisect --good A --bad HEAD` in a
fresh process inside the history's tree; it names the regression when its first_bad is commit K.

  python benchmarks/bisect_eval.py history OUT --tree eager --commits 5 --at 3       # OUT/hist-eager-5-3
  python benchmarks/bisect_eval.py trials OUT --plan "eager:5:3:10,spin05:16:11:10" --budget 2m [--cotenant 0.34]
  python benchmarks/bisect_eval.py report OUT

Run `python benchmarks/gate_eval.py trees OUT --record 10` first (OUT/A). Trials append to OUT/bisect.jsonl.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gate_eval as ge


def history(out: Path, tree: str, commits: int, at: int) -> Path:
    hist = out / f"hist-{tree}-{commits}-{at}"
    if hist.exists():
        return hist
    base = ge.git("rev-parse", "HEAD", cwd=out / "A")
    ge.git("worktree", "add", "--detach", str(hist), base)
    msg = ge.REGRESSIONS[tree][-1]
    note = hist / "docs" / "bisect-history.md"
    for i in range(1, commits + 1):
        with note.open("a") as fh:
            fh.write(f"- commit {i} of {commits}\n")
        if i == at:
            ge.apply_regression(hist, tree)
        ge.git("add", "-A", cwd=hist)
        ge.git("commit", "-qm", f"history {i}/{commits}" + (f": {msg}" if i == at else ""), cwd=hist)
    print(f"{hist}: {commits} commits on {base[:12]}, the regression ({tree}) in commit {at}", flush=True)
    return hist


def trial(out: Path, tree: str, commits: int, at: int, budget: str, busy: bool) -> dict:
    hist = history(out, tree, commits, at)
    good = ge.git("rev-parse", f"HEAD~{commits}", cwd=hist)
    want = ge.git("rev-parse", f"HEAD~{commits - at}", cwd=hist)
    with tempfile.TemporaryDirectory() as tmp, ge.CoTenant(busy):
        res = Path(tmp) / "bisect.json"
        t0 = time.monotonic()
        proc = ge.run_child([sys.executable, "-m", "perfsuite.cli", "bisect", "--good", good, "--bad", "HEAD",
                             "--backend", "torch", "--budget", budget, "--json", str(res)], cwd=hist, env=ge._env(hist))
        wall = time.monotonic() - t0
        data = json.loads(res.read_text()) if res.exists() else {}
    ops = (data.get("operators") or {}).get("rows") or []
    return {"key": f"{tree}:{commits}:{at}:{budget}", "tree": tree, "commits": commits, "at": at, "budget": budget,
            "cotenant": busy, "rc": proc.returncode, "wall_s": wall, "named": data.get("first_bad") == want,
            "first_bad": data.get("first_bad"), "want": want, "stopped": data.get("stopped"),
            "candidates": data.get("candidates"), "steps": data.get("steps"), "top_ops": [r["op"] for r in ops[:3]],
            "ops_verdict": (data.get("operators") or {}).get("verdict"), "finished": time.time(),
            "tail": "" if proc.returncode in (0, 1) else (proc.stdout + proc.stderr)[-1500:],
            "stdout": proc.stdout[-6000:]}  # what the user reads (docs/gate.md quotes one)


def cmd_trials(out: Path, plan: str, budget: str, cotenant: float, seed: int | None) -> None:
    log = out / "bisect.jsonl"
    done = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    todo = []
    for part in plan.split(","):
        tree, n, at, k = part.split(":")
        key = f"{tree}:{n}:{at}:{budget}"
        have = [r for r in done if r["key"] == key]
        left = max(0, int(k) - len(have))
        busy = max(0, round(int(k) * cotenant) - sum(r["cotenant"] for r in have))
        todo += [(tree, int(n), int(at), i < busy) for i in range(left)]
    random.Random(seed).shuffle(todo)
    for i, (tree, n, at, busy) in enumerate(todo, 1):
        r = trial(out, tree, n, at, budget, busy)
        with log.open("a") as fh:
            fh.write(json.dumps(r) + "\n")
        print(f"[{i}/{len(todo)}] {r['key']}{' +cotenant' if busy else ''}: named={r['named']} rc={r['rc']} "
              f"{r['wall_s']:.0f} s, {len(r['steps'] or [])} steps, stopped {r['stopped']}; top ops {r['top_ops']}",
              flush=True)


def cmd_report(out: Path) -> None:
    recs = [json.loads(x) for x in (out / "bisect.jsonl").read_text().splitlines()]
    lines = ["| history | trials | names the commit | wall time median (max) | steps median | beside a co-tenant |",
             "|---|---|---|---|---|---|"]
    for key in sorted({r["key"] for r in recs}):
        rs = [r for r in recs if r["key"] == key]
        walls = [r["wall_s"] for r in rs]
        lines.append(f"| {key} | {len(rs)} | {ge._rate(sum(r['named'] for r in rs), len(rs))} | "
                     f"{statistics.median(walls) / 60:.1f} min ({max(walls) / 60:.1f}) | "
                     f"{statistics.median(len(r['steps'] or []) for r in rs):.0f} | {sum(r['cotenant'] for r in rs)} |")
    text = "\n".join(lines) + "\n"
    (out / "bisect_report.md").write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("history")
    p.add_argument("out", type=Path)
    p.add_argument("--tree", required=True, choices=sorted(ge.REGRESSIONS))
    p.add_argument("--commits", type=int, required=True)
    p.add_argument("--at", type=int, required=True)
    p = sub.add_parser("trials")
    p.add_argument("out", type=Path)
    p.add_argument("--plan", required=True, help="tree:commits:at:trials, comma-separated")
    p.add_argument("--budget", default="2m")
    p.add_argument("--cotenant", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    p = sub.add_parser("report")
    p.add_argument("out", type=Path)
    a = ap.parse_args()
    if a.cmd == "history":
        history(a.out, a.tree, a.commits, a.at)
    elif a.cmd == "trials":
        cmd_trials(a.out, a.plan, a.budget, a.cotenant, a.seed)
    else:
        cmd_report(a.out)


if __name__ == "__main__":
    from perfsuite.machine.signals import stoppable

    with stoppable():
        main()
