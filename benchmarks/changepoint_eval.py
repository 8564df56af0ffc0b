"""How fast the nightly change-point detection flags a true 5 % step, and how often it cries wolf (A/A).

Real runs, two trees. Tree A is this checkout; tree B is a second checkout whose decode is really slower: by
default `git worktree add --detach` of HEAD run with PERFSUITE_INJECT_DECODE_SLOWDOWN=0.05 (a timed spin inside
the torch decode step, so every decode step really takes 5 % longer), or any tree you give with --slow-tree
(e.g. a commit with a real code change). Each "nightly" is one `python -m pytest tests/perf` process run from
its tree (so it imports that tree's code), torch tiny-llama cell, as the nightly job runs it. A and B runs are
collected interleaved in a random order, so machine drift falls on both alike.

  collect   run N_A nightlies of A and N_B of B (resumable: adds to what DIR has)
  evaluate  build series through the product (perfsuite.orchestrate.history: ingest, then change points) and measure:
            * delay: disjoint trials, each PRE A-nights then POST B-nights added one night at a time; nights until
              a regression change point at the step (+-1) is reported
            * A/A: all A nights replayed in order, one night at a time, as the nightly job does; distinct false
              change points per 100 nightlies
            * the noise of the series (SD of log values, lag-1 autocorrelation) and the realised step size
  synthetic the same two measurements on synthetic lognormal / heavy-tailed series (no runs needed)

  python benchmarks/changepoint_eval.py collect --out /tmp/cpd --runs-a 200 --runs-b 60 --inject 0.05
  python benchmarks/changepoint_eval.py evaluate /tmp/cpd --pre 20 --post 6
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfsuite.orchestrate import history  # noqa: E402
from perfsuite.orchestrate.history import query  # noqa: E402
from perfsuite.verdict import changepoint as cpd  # noqa: E402

INJECT_ENV = "PERFSUITE_INJECT_DECODE_SLOWDOWN"
CELL = "torch-tiny-llama-float32-b1-p64-n32"


# ---- collect ------------------------------------------------------------------------------------------------

def _slow_tree(out: Path, given: str | None) -> Path:
    if given:
        tree = Path(given).resolve()
        if not (tree / "tests" / "perf").is_dir():
            sys.exit(f"--slow-tree {tree}: not a perfsuite checkout (no tests/perf)")
        return tree
    tree = out / "slow-tree"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), "HEAD"], cwd=ROOT, check=True)
    return tree


def _nightly(tree: Path, python: str, path: Path, env_extra: dict[str, str], pytest_args: list[str]) -> tuple[int, float]:
    env = {k: v for k, v in os.environ.items() if k != INJECT_ENV}
    env.update(env_extra)
    cmd = [python, "-m", "pytest", "tests/perf", "-q", "-p", "no:cacheprovider", "--perf-backend", "torch",
           "--perf-model", "tiny-llama", f"--benchmark-json={path}", *pytest_args]
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True).returncode
    return rc, time.perf_counter() - t0


def collect(args: argparse.Namespace) -> int:
    out = args.out.resolve()
    (out / "a").mkdir(parents=True, exist_ok=True)
    (out / "b").mkdir(parents=True, exist_ok=True)
    slow = _slow_tree(out, args.slow_tree)
    b_env = {} if args.slow_tree else {INJECT_ENV: f"{args.inject:g}"}
    log_path = out / "collect_log.json"
    log = json.loads(log_path.read_text()) if log_path.exists() else []
    have = {s: len(list((out / s).glob("*.json"))) for s in ("a", "b")}
    todo = ["a"] * max(0, args.runs_a - have["a"]) + ["b"] * max(0, args.runs_b - have["b"])
    random.Random(args.seed + len(log)).shuffle(todo)
    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    for i, side in enumerate(todo, 1):
        n = have[side] + 1
        path = out / side / f"{n:04d}.json"
        tree, env = (ROOT, {}) if side == "a" else (slow, b_env)
        rc, wall = _nightly(tree, args.python, path, env, extra)
        log.append({"side": side, "n": n, "rc": rc, "wall_s": round(wall, 1), "t": time.time(), "tree": str(tree),
                    "env": env})
        log_path.write_text(json.dumps(log, indent=1))
        if rc != 0 or not path.is_file():
            print(f"{side.upper()} nightly {n} failed (exit {rc}); see `cd {tree} && python -m pytest tests/perf`")
            path.unlink(missing_ok=True)
            return 2
        have[side] = n
        print(f"[{i}/{len(todo)}] {side.upper()} {n:4d}  {wall:5.1f} s", flush=True)
    print(f"{out}: {have['a']} A runs, {have['b']} B runs ({'tree ' + str(slow) if args.slow_tree else b_env})")
    return 0


# ---- evaluate -----------------------------------------------------------------------------------------------

def _as_night(src: Path, night: int, dest: Path) -> Path:
    """A copy of a run file dated and committed as nightly number ``night`` (the measurements untouched)."""
    d = json.loads(src.read_text())
    d = copy.deepcopy(d)
    d["datetime"] = (dt.datetime(2026, 1, 1, 2, 17, tzinfo=dt.timezone.utc) + dt.timedelta(days=night)).isoformat()
    d["commit_info"]["id"] = f"{night:040x}"
    dest.write_text(json.dumps(d))
    return dest


def _series_key(db: history.History, name: str) -> query.SeriesKey:
    keys = [k for k in query.series_keys(db, cell=CELL, names=[name])]
    if not keys:
        sys.exit(f"no series {CELL} {name} in the runs")
    return keys[0]


class Replay:
    """A history database fed one nightly at a time, as the nightly job feeds it."""

    def __init__(self, tmp: Path, name: str, detect: dict) -> None:
        self.tmp, self.name, self.detect, self.night = tmp, name, detect, 0
        self.db = history.open_history(tmp / "h.sqlite")

    def add(self, run: Path) -> list[query.Finding]:
        history.ingest(self.db, [_as_night(run, self.night, self.tmp / f"n{self.night:04d}.json")])
        self.night += 1
        key = _series_key(self.db, self.name)
        try:
            return query.find_changes(self.db, key, **self.detect)
        except cpd.SeriesTooShort:
            return []


def _values(paths: list[Path], name: str) -> np.ndarray:
    out = []
    for p in paths:
        d = json.loads(p.read_text())
        for b in d["benchmarks"]:
            info = b["extra_info"]
            if info.get("cell", {}).get("id") == CELL and name in info and query.PRIMARY.get(info["metric"]) == name:
                out.append(float(info[name]))
    return np.asarray(out)


def _noise(x: np.ndarray) -> dict:
    lx = np.log(x)
    r1 = float(np.corrcoef(lx[:-1], lx[1:])[0, 1]) if x.size > 2 else float("nan")
    return {"n": int(x.size), "median": float(np.median(x)), "sd_log": float(lx.std(ddof=1)),
            "mad_sd_log": float(1.4826 * np.median(np.abs(lx - np.median(lx)))), "lag1_autocorr": r1}


def evaluate(args: argparse.Namespace) -> int:
    a = sorted((args.dir / "a").glob("*.json"))
    b = sorted((args.dir / "b").glob("*.json"))
    name = args.name
    detect = {"max_pvalue": args.max_pvalue, "min_size": args.min_size, "window": args.window}
    va, vb = _values(a, name), _values(b, name)
    step = float(np.median(vb) / np.median(va) - 1) if va.size and vb.size else float("nan")
    rng = np.random.default_rng(0)
    boot = [np.median(rng.choice(vb, vb.size)) / np.median(rng.choice(va, va.size)) - 1 for _ in range(2000)]
    result: dict = {"runs_a": len(a), "runs_b": len(b), "metric": name, "detect": detect,
                    "noise_a": _noise(va) if va.size > 2 else None, "noise_b": _noise(vb) if vb.size > 2 else None,
                    "realised_step": step, "realised_step_ci95": [float(np.percentile(boot, 2.5)),
                                                                  float(np.percentile(boot, 97.5))]}
    print(f"A: {len(a)} runs, B: {len(b)} runs; {name} of {CELL}")
    if result["noise_a"]:
        n = result["noise_a"]
        print(f"noise (A): SD of log {n['sd_log']:.3f} (robust {n['mad_sd_log']:.3f}), lag-1 autocorrelation "
              f"{n['lag1_autocorr']:+.2f}")
    print(f"realised step B/A: {step:+.2%} (95 % bootstrap CI {result['realised_step_ci95'][0]:+.2%} .. "
          f"{result['realised_step_ci95'][1]:+.2%})")
    # delay trials: disjoint slices of A and B
    trials = min(len(a) // args.pre, len(b) // args.post)
    delays: list[int | None] = []
    for t in range(trials):
        with tempfile.TemporaryDirectory() as tmp:
            rp = Replay(Path(tmp), name, detect)
            for run in a[t * args.pre:(t + 1) * args.pre]:
                rp.add(run)
            delay = None
            for k, run in enumerate(b[t * args.post:(t + 1) * args.post], 1):
                found = rp.add(run)
                if any(f.kind == "regression" and abs(f.change.index - args.pre) <= 1 for f in found):
                    delay = k
                    break
            rp.db.close()
        delays.append(delay)
        print(f"trial {t + 1}/{trials}: flagged after {delay if delay else f'> {args.post}'} nightlies", flush=True)
    flagged = [d for d in delays if d is not None]
    result["delays"] = delays
    if trials:
        within3 = sum(1 for d in flagged if d <= 3)
        print(f"delay: flagged in {len(flagged)}/{trials} trials within {args.post} nightlies; within 3: "
              f"{within3}/{trials}; median delay {np.median(flagged) if flagged else float('nan'):g} (goal <= 3)")
    else:
        print(f"delay: no trial (need >= {args.pre} A and >= {args.post} B runs)")
    # A/A: replay every A run as a nightly
    with tempfile.TemporaryDirectory() as tmp:
        rp = Replay(Path(tmp), name, detect)
        seen: list[int] = []
        for run in a:
            for f in rp.add(run):
                if all(abs(f.change.index - s) > 3 for s in seen):
                    seen.append(f.change.index)
        rp.db.close()
    nights = max(0, len(a) - cpd.needed_points(args.min_size) + 1)
    per100 = len(seen) / nights * 100 if nights else float("nan")
    result.update(aa_nightlies=nights, aa_false_change_points=len(seen), aa_per_100=per100)
    print(f"A/A: {len(seen)} distinct false change point(s) over {nights} tested nightlies = {per100:.2f} per 100 "
          "(goal <= 1)")
    (args.dir / "evaluation.json").write_text(json.dumps(result, indent=1))
    return 0


# ---- synthetic ----------------------------------------------------------------------------------------------

def synthetic(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(args.seed)
    shapes = {"lognormal": lambda n, s: rng.normal(0, s, n),
              "t3 (heavy tails)": lambda n, s: s / math.sqrt(3) * rng.standard_t(3, n),
              "bimodal (20 % slow mode, +13 %)": lambda n, s: np.where(rng.random(n) < 0.2, 0.13, 0) + rng.normal(0, s, n)}
    print(f"{'noise':34} {'SD log':>6} {'flagged <= 3':>13} {'median delay':>13} {'false per 100 nightlies':>24}")
    for shape, draw in shapes.items():
        for s in args.sigmas:
            delays = []
            for _ in range(args.trials):
                pre, post = draw(args.pre, s), draw(args.post, s) + math.log(1 + args.step)
                d = None
                for k in range(1, args.post + 1):
                    cps = cpd.e_divisive(np.exp(np.concatenate([pre, post[:k]])), max_pvalue=args.max_pvalue,
                                         min_size=args.min_size)
                    if any(abs(c.index - args.pre) <= 1 and c.ratio > 1 for c in cps):
                        d = k
                        break
                delays.append(d if d else 99)
            false, nights = 0, 0
            for _ in range(args.aa_series):
                x = np.exp(draw(100, s))
                seen: list[int] = []
                for n in range(cpd.needed_points(args.min_size), x.size + 1):
                    nights += 1
                    for c in cpd.e_divisive(x[max(0, n - args.window):n], max_pvalue=args.max_pvalue,
                                            min_size=args.min_size):
                        pos = c.index + max(0, n - args.window)
                        if all(abs(pos - q) > 3 for q in seen):
                            seen.append(pos)
                false += len(seen)
            print(f"{shape:34} {s:6.3f} {np.mean(np.array(delays) <= 3):13.0%} {np.median(delays):13g} "
                  f"{false / nights * 100:24.2f}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--runs-a", type=int, default=200)
    c.add_argument("--runs-b", type=int, default=60)
    c.add_argument("--inject", type=float, default=0.05, help="decode slowdown of the B tree (default 0.05)")
    c.add_argument("--slow-tree", default=None, help="a checkout that is slower by a code change (no injection)")
    c.add_argument("--python", default=sys.executable)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- extra pytest arguments for every nightly")
    e = sub.add_parser("evaluate")
    e.add_argument("dir", type=Path)
    e.add_argument("--pre", type=int, default=20, help="A nightlies before the step, per trial (default 20)")
    e.add_argument("--post", type=int, default=6, help="B nightlies after it, per trial (default 6)")
    s = sub.add_parser("synthetic")
    s.add_argument("--sigmas", type=float, nargs="+", default=[0.01, 0.02, 0.03])
    s.add_argument("--step", type=float, default=0.05)
    s.add_argument("--pre", type=int, default=20)
    s.add_argument("--post", type=int, default=8)
    s.add_argument("--trials", type=int, default=100)
    s.add_argument("--aa-series", type=int, default=10, help="A/A series of 100 nightlies each")
    s.add_argument("--seed", type=int, default=0)
    for p in (e, s):
        p.add_argument("--name", default="median_tpot_ms")
        p.add_argument("--max-pvalue", type=float, default=cpd.DEFAULT_MAX_PVALUE)
        p.add_argument("--min-size", type=int, default=cpd.DEFAULT_MIN_SIZE)
        p.add_argument("--window", type=int, default=200)
    args = ap.parse_args()
    return {"collect": collect, "evaluate": evaluate, "synthetic": synthetic}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
