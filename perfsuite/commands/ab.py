"""``perfsuite ab``: does tree B run slower than tree A? Randomized pairs of fresh worker processes on this
machine, decided sequentially with an always-valid confidence sequence (docs/gate.md).

Each side is a source tree and an interpreter; its worker processes run from its own tree, so they import its
code (a probe checks where each side's ``perfsuite`` comes from). Pairs are added, A and B in random order inside
each pair, until every gated metric is decided, a regression is found, or the wall-time budget is spent. The
false-alarm rate stays at alpha however early it stops (Ville's inequality on a betting martingale).

Examples:
  git worktree add ../base origin/main
  perfsuite ab --a ../base --b . --budget 5m                       # same interpreter for both trees
  perfsuite ab --a ../base --a-python ../base/.venv/bin/python --b . --budget 2m --cells 'torch-*'

Exit status: 0 no regression (unchanged, improvement, or inconclusive), 1 regression, 2 bad input or a worker
failed, 3 inconclusive with --fail-on-inconclusive. Nothing is written to baselines/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.commands._common import check_locations, parse_duration
from perfsuite.errors import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser("ab", help="is tree B slower than tree A? sequential randomized A/B; exit 1 on a regression",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for side, default in (("a", None), ("b", ".")):
        up = side.upper()
        p.add_argument(f"--{side}", dest=f"{side}_tree", default=default, metavar="TREE",
                       help=f"source tree of {up} (a perfsuite checkout)" + (" (default: .)" if default else ""))
        p.add_argument(f"--{side}-python", default=None, metavar="PY",
                       help=f"interpreter of {up} (default: this one); it must import perfsuite from its tree")
        p.add_argument(f"--{side}-env", action="append", default=[], metavar="KEY=VALUE",
                       help=f"extra environment variable for {up}'s workers (repeatable)")
    p.add_argument("--budget", default="5m", help="wall-time budget, e.g. 90s, 2m, 1h (default 5m)")
    p.add_argument("--max-pairs", type=int, default=1000, help="stop after this many pairs (default 1000)")
    p.add_argument("--profile", default="smoke", help="profile whose cells and generations are used (default smoke)")
    p.add_argument("--backend", default=None, help="comma-separated backends (default: the profile's)")
    p.add_argument("--model", default=None, help="comma-separated models (default: the profile's)")
    p.add_argument("--device", default="cpu", help="cpu | cuda (default cpu)")
    p.add_argument("--cells", default="*", help="glob on cell ids, e.g. 'torch-tiny-llama-*' (default all)")
    p.add_argument("--config", type=Path, default=None, help="pyproject.toml with [tool.perfsuite.gate] "
                   "(default: the one above the working directory)")
    p.add_argument("--alpha", type=float, default=None, help="family-wise false-alarm rate (default: config)")
    p.add_argument("--threshold", type=float, default=None, help="relative slowdown that counts as a regression "
                   "(default: config ab_threshold, 0.01)")
    p.add_argument("--margin", type=float, default=None, help="equivalence margin for 'unchanged' (default: "
                   "config ab_margin, 0.02)")
    p.add_argument("--seed", type=int, default=None, help="seed of the order coin flips (default: random)")
    p.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when the budget ends undecided")
    p.add_argument("--out", type=Path, default=None, help="keep worker files and pairs.jsonl here")
    p.add_argument("--json", type=Path, default=None, help="write the verdicts and every pair here as JSON")
    p.set_defaults(func=main)


# --------------------------------------------------------------------------------------------------- sides
def _env(items: list[str], side: str) -> tuple[tuple[str, str], ...]:
    out = []
    for it in items:
        key, sep, value = it.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise UsageError(f"--{side}-env {it!r}: expected KEY=VALUE with a variable name as KEY")
        out.append((key, value))
    return tuple(out)


def _tree(path: str | None, side: str) -> Path:
    if path is None:
        raise UsageError(f"--{side} TREE is required: the reference checkout (e.g. `git worktree add ../base "
                         "origin/main` then --a ../base)")
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise UsageError(f"--{side} {path}: no such directory")
    from perfsuite import config as cfg

    if not (p / "perfsuite" / "__init__.py").is_file() or cfg.find_pyproject(p) != p / "pyproject.toml":
        raise UsageError(f"--{side} {path}: not a perfsuite checkout (needs perfsuite/__init__.py and a "
                         "pyproject.toml with [tool.perfsuite] at its top)")
    return p


# ------------------------------------------------------------------------------------------------- members
@dataclass
class Member:
    """One gated (cell, metric) of the A/B and its confidence sequence."""

    cell_id: str
    test_metric: str  # ttft | tpot | e2el: what the worker measures
    metric: str  # policy metric, e.g. median_tpot_ms
    stat: str  # median / mean / p90 ...
    sample_key: str  # tpot_ms ...
    sign: float  # +1 when larger is worse
    alpha: float
    cs: Any = None
    kind: str = "open"
    note: str = ""
    a_values: list[float] = field(default_factory=list)
    b_values: list[float] = field(default_factory=list)


def _members(cells: list[dict[str, Any]], config: Any, alpha: float) -> list[Member]:
    from perfsuite.gate.policy import _LAT
    from perfsuite.gate.sequential import ConfidenceSequence
    from perfsuite.worker.job import METRICS

    out: list[Member] = []
    for c in cells:
        for m in METRICS:
            test = f"test_{m}_under_load[{c['id']}]" if c["backend"] == "vllm-serve" else f"test_{m}[{c['id']}]"
            for pol in config.policies_for(c["id"], test):
                lat = _LAT.match(pol.metric)
                if pol.exact or not lat or lat.group(2) not in _samples_of(m):
                    continue
                out.append(Member(c["id"], m, pol.metric, lat.group(1), f"{lat.group(2)}_ms",
                                  -1.0 if pol.direction == "higher_is_better" else 1.0, alpha))
    per = alpha / max(len(out), 1)  # Bonferroni over the family: valid for any stopping rule
    for mem in out:
        mem.alpha = per
        mem.cs = ConfidenceSequence(per)
    return out


def _samples_of(metric: str) -> set[str]:
    return {"ttft": {"ttft"}, "tpot": {"tpot", "itl"}, "e2el": {"ttft", "tpot", "itl", "e2el"}}[metric]


def _value(pr: Any, mem: Member) -> float:
    from perfsuite.gate.stats import statistic

    return statistic(pr.metrics[mem.test_metric].samples[mem.sample_key], mem.stat)


# ---------------------------------------------------------------------------------------------------- main
def main(args: argparse.Namespace) -> int:
    from perfsuite import precheck
    from perfsuite.gate import sequential
    from perfsuite.gate.policy import PolicyError, load_config
    from perfsuite.progress import Progress
    from perfsuite.serve import replicate as serve_replicate
    from perfsuite.worker import pool

    check_locations((args.out, "--out", "folder"), (args.json, "--json", "file"), cache=True)
    budget = parse_duration(args.budget)
    if args.max_pairs < 2:
        raise UsageError("--max-pairs must be >= 2")
    try:
        config = load_config(args.config, alpha=args.alpha, ab_threshold=args.threshold, ab_margin=args.margin)
    except PolicyError as exc:
        raise UsageError(str(exc)) from None
    sides = {}
    for s in ("a", "b"):
        tree = _tree(getattr(args, f"{s}_tree"), s)
        python = getattr(args, f"{s}_python") or sys.executable
        sides[s] = pool.Side(tree, python, s.upper(), _env(getattr(args, f"{s}_env"), s))
        try:
            precheck.check_thread_env(sides[s].environ())
        except precheck.PreflightError as exc:
            raise UsageError(f"side {s.upper()}: {exc}") from None
    plan_args = {"profile": args.profile, "backend": args.backend, "model": args.model, "device": args.device,
                 "cells": args.cells}
    plans = {}
    try:
        for s, side in sides.items():
            pool.probe(side)
            plans[s] = pool.plan(side, plan_args)
            pool.probe(side, ("perfsuite.worker.child", *pool.preload_modules({c["backend"] for c in
                                                                               plans[s]["cells"]})))
            plans[s]["cells"] += serve_replicate.cells(side, plan_args)  # serving cells: a start is a replicate
    except pool.SideError as exc:
        raise UsageError(str(exc)) from None
    cells = _same_cells(plans["a"], plans["b"])
    members = _members(cells, config, config.alpha)
    if not members:
        raise UsageError("no statistical gate policy applies to the selected cells; check [tool.perfsuite.gate]")
    tau, eps = math.log1p(config.ab_threshold), math.log1p(config.ab_margin)
    out_dir = args.out
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    pools = {s: pool.Pool(side, (out_dir / f"workers-{s}") if out_dir else None,
                          preload=pool.preload_modules({c["backend"] for c in cells})) for s, side in sides.items()}
    rng = random.Random(args.seed)
    progress = Progress(min_interval_s=10.0)
    pairs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    pair_walls: list[float] = []
    stop_reason = "budget"
    print(f"perfsuite ab: A = {sides['a'].tree}, B = {sides['b'].tree}; {len(cells)} cell(s), {len(members)} gated "
          f"metric(s), alpha {config.alpha:g} (Bonferroni), regression beyond {config.ab_threshold:.1%}, "
          f"unchanged inside ±{config.ab_margin:.1%}, budget {budget:.0f} s", flush=True)
    try:
        n = 0
        while n < args.max_pairs:
            expected = (sum(pair_walls) / len(pair_walls)) * len(cells) if pair_walls else 0.0
            if time.monotonic() - t0 + expected > budget and n >= 2:
                break
            n += 1
            for cell in rng.sample(cells, len(cells)):
                order = ["a", "b"] if rng.random() < 0.5 else ["b", "a"]
                got = {}
                tp = time.monotonic()
                for s in order:
                    got[s] = _measure(pools[s], cell, plans[s], n, s)
                pair_walls.append(time.monotonic() - tp)
                pairs.append(_record_pair(n, cell, order, got, members))
            decided = [sequential.decide(m.cs, tau, eps) for m in members]
            for m, d in zip(members, decided, strict=True):
                m.kind, m.note = d.kind, d.note
            progress.update(_progress_line(n, time.monotonic() - t0, budget, members))
            if any(m.kind == "regression" for m in members):
                stop_reason = "regression"
                break
            if all(m.kind != "open" for m in members):
                stop_reason = "decided"
                break
        else:
            stop_reason = "max-pairs"
    except KeyboardInterrupt:  # keep the pairs measured so far; a pair cut in half is not one
        stop_reason = "interrupted"
        for m, d in zip(members, [sequential.decide(m.cs, tau, eps) for m in members], strict=True):
            m.kind, m.note = d.kind, d.note
    finally:
        for pl in pools.values():
            pl.close()
    progress.done()
    elapsed = time.monotonic() - t0
    pair_s = sum(pair_walls) / max(len(pair_walls), 1) * len(cells)
    rows = [_row(m, tau, eps, pair_s, config.power) for m in members]
    for line in _table(rows):
        print(line)
    n_pairs = len(pairs) // max(len(cells), 1)
    print(f"{n_pairs} pair(s) per cell in {elapsed:.0f} s (stopped: {stop_reason}); A/B order randomized in every "
          f"pair; always-valid {1 - config.alpha:.0%} family-wise confidence sequences"
          + (f"; workers in {out_dir}" if out_dir else ""))
    result = {"kind": "ab", "runner_class": _runner_class(args.device), "profile": plans["b"]["profile"],
              "datetime": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "a": _side_facts(sides["a"]), "b": _side_facts(sides["b"]), "alpha": config.alpha,
              "ab_threshold": config.ab_threshold, "ab_margin": config.ab_margin, "budget_s": budget,
              "elapsed_s": elapsed, "stopped": stop_reason, "interrupted": stop_reason == "interrupted",
              "pairs": pairs, "verdicts": rows}
    if out_dir is not None:
        (out_dir / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if stop_reason == "interrupted":
        kept = [str(p) for p in (args.json, out_dir and out_dir / "pairs.jsonl") if p]
        print(f"perfsuite ab: interrupted after {n_pairs} pair(s) per cell; the table above is what they show"
              + (f"; wrote {', '.join(kept)}" if kept else " (pass --json FILE to keep them)"), file=sys.stderr)
        return 130
    if any(r["verdict"] == "regression" for r in rows):
        return 1
    if args.fail_on_inconclusive and any(r["verdict"] == "inconclusive" for r in rows):
        return 3
    return 0


def _runner_class(device: str) -> str | None:
    from perfsuite import runner_class

    try:
        return runner_class.detect(device)[0]
    except Exception:  # a class is context for the history; an A/B needs none
        return None


def _side_facts(side: Any) -> dict[str, Any]:
    from perfsuite.external import run_tool

    git = run_tool(["git", "-C", str(side.tree), "rev-parse", "HEAD"], 10)
    commit = git.stdout.strip() or None if git.ok else None
    return {"tree": str(side.tree), "python": side.python, "commit": commit}


def _same_cells(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    ca = {c["id"]: c for c in a["cells"]}
    cb = {c["id"]: c for c in b["cells"]}
    if not ca and not cb:
        raise UsageError("no cell selected on either side; check --profile/--backend/--model/--cells")
    if set(ca) != set(cb):
        only_a, only_b = sorted(set(ca) - set(cb)), sorted(set(cb) - set(ca))
        raise UsageError(f"the sides select different cells (only A: {', '.join(only_a) or '-'}; only B: "
                         f"{', '.join(only_b) or '-'}); use --cells to pick the common ones")
    for key in ("generations", "warmup_generations"):
        if a[key] != b[key]:
            raise UsageError(f"the sides measure differently: {key} {a[key]} (A) vs {b[key]} (B) in profile "
                             f"{a['profile']}; compare like with like (align [tool.perfsuite.profiles])")
    for cid in ca:
        if ca[cid].get("options_hash") != cb[cid].get("options_hash"):
            raise UsageError(f"cell {cid}: backend options differ between the sides (options hash "
                             f"{ca[cid].get('options_hash')} vs {cb[cid].get('options_hash')}); a change of options "
                             "is not a code change: align [tool.perfsuite.backend_options]")
    return list(ca.values())


def _measure(pl: Any, cell: dict[str, Any], plan: dict[str, Any], n: int, s: str) -> Any:
    from perfsuite.worker import pool
    from perfsuite.worker.job import METRICS, cell_from_dict, make_job

    if cell["backend"] == "vllm-serve":  # a server start from the side's own tree (perfsuite.serve.replicate)
        from perfsuite.serve.replicate import measure_or_fail

        return measure_or_fail(pl.side, cell, plan["profile"], n, s.upper())
    c = cell_from_dict(cell)
    metrics = list(METRICS)
    random.shuffle(metrics)
    job = make_job(c, metrics, generations=plan["generations"], warmup=plan["warmup_generations"], cache_dir=None,
                   index=n, label=s.upper())
    pr = pl.measure(job, fork=pool.forkable(c.backend))
    if pr.skip:
        raise UsageError(f"side {s.upper()} cannot run {c.id}: {pr.skip}")
    if pr.error:
        raise UsageError(f"side {s.upper()}, pair {n}, {c.id}: worker failed: {pr.error}")
    return pr


def _record_pair(n: int, cell: dict[str, Any], order: list[str], got: dict[str, Any], members: list[Member]
                 ) -> dict[str, Any]:
    rec: dict[str, Any] = {"pair": n, "cell": cell["id"], "order": "".join(o.upper() for o in order),
                           "pid": {s.upper(): got[s].pid for s in got},
                           "perfsuite_file": {s.upper(): got[s].perfsuite_file for s in got}, "values": {}}
    for m in members:
        if m.cell_id != cell["id"]:
            continue
        a, b = _value(got["a"], m), _value(got["b"], m)
        m.a_values.append(a)
        m.b_values.append(b)
        m.cs.update(m.sign * math.log(b / a))
        rec["values"][f"{m.test_metric}:{m.metric}"] = {"A": a, "B": b}
    tok_a = {k: v.generated_tokens for k, v in got["a"].metrics.items()}
    tok_b = {k: v.generated_tokens for k, v in got["b"].metrics.items()}
    rec["generated_tokens_equal"] = tok_a == tok_b
    rec["first_tokens_equal"] = all(got["a"].metrics[k].first_tokens == got["b"].metrics[k].first_tokens
                                    for k in got["a"].metrics)
    if tok_a != tok_b:
        raise UsageError(f"pair {n}, {cell['id']}: generated token counts differ (A {tok_a}, B {tok_b}): the "
                         "sides do not run the same workload")
    return rec


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{math.expm1(x) * 100:+.2f}%"


def _progress_line(n: int, elapsed: float, budget: float, members: list[Member]) -> str:
    parts = []
    for m in members:
        if m.test_metric == "tpot" or len(members) <= 3:
            lo, hi = m.cs.interval()
            parts.append(f"{m.metric} {_pct(m.cs.estimate())} [{_pct(lo)}, {_pct(hi)}] {m.kind}")
    return f"pair {n}, {elapsed:.0f}/{budget:.0f} s: " + "; ".join(parts[:4])


def _row(m: Member, tau: float, eps: float, pair_s: float, power: float) -> dict[str, Any]:
    from perfsuite.gate import sequential

    lo, hi = m.cs.interval()
    kind = "inconclusive" if m.kind == "open" else m.kind
    change = math.expm1(m.sign * m.cs.estimate()) if m.cs.n else None
    row: dict[str, Any] = {"cell": m.cell_id, "test": f"test_{m.test_metric}[{m.cell_id}]", "metric": m.metric,
                           "verdict": kind, "kind": kind, "change": change,
                           "ratio": None if change is None else 1 + change,
                           "ci_low": math.expm1(lo), "ci_high": math.expm1(hi), "pairs": m.cs.n, "alpha": m.alpha,
                           "note": m.note, "a_values": m.a_values, "b_values": m.b_values}
    if kind == "inconclusive":
        mde = sequential.mde_reached(m.cs, power)
        more = sequential.pairs_to_settle(m.cs, tau, eps)
        row["mde"] = math.expm1(mde) if math.isfinite(mde) else None
        row["settle_pairs"] = more
        row["settle_budget_s"] = None if more is None else more * pair_s
        settle = (f"about {row['settle_budget_s'] / 60:.0f} min ({more} pairs) would settle it" if more
                  else "no budget in reach would settle it at this spread")
        row["note"] = f"MDE reached {_pct(mde)}; {settle}"
    return row


def _table(rows: list[dict[str, Any]]) -> list[str]:
    head = ("cell", "test", "metric", "verdict", "change", "interval", "pairs", "note")
    lines = [head]
    for r in rows:
        ch = "n/a" if r["change"] is None else f"{r['change'] * 100:+.2f}%"
        lines.append((r["cell"], r["test"].split("[")[0], r["metric"], r["verdict"].upper() if r["verdict"] == "regression"
                      else r["verdict"], ch, f"[{r['ci_low'] * 100:+.2f}%, {r['ci_high'] * 100:+.2f}%]",
                      str(r["pairs"]), r["note"]))
    widths = [max(len(x[i]) for x in lines) for i in range(len(head) - 1)]
    out = ["  ".join(c.ljust(w) for c, w in zip(x, widths, strict=False)) + ("  " + x[-1] if x[-1] else "")
           for x in lines]
    out.insert(1, "-" * min(160, len(out[0])))
    return out
