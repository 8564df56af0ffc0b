"""``perfsuite calibrate`` for serving cells: a replicate is a server start, so the levels read "within a start"
(the spread of one start's requests), "between starts" (inside a run: what more ``server_starts`` reduce) and
"between runs"; the gate's MDE is for the profile's ``server_starts`` per run against ``baseline_runs`` runs, and
the ab pairs are pairs of starts (``perfsuite ab --cells 'vllm-serve-*'``). Each run starts every server
``starts`` times, each start running all its points in a random order, exactly as the serving cells do."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.facts import config as cfg
from perfsuite.facts.errors import UsageError, reraise_as
from perfsuite.facts.vocabulary import LATENCIES
from perfsuite.measure.serving import cell as sc
from perfsuite.measure.serving.replicate import select as pick
from perfsuite.verdict.noise import decompose, format_report

_FLOOR_MS = 1e-6  # a TPOT/ITL of 0 (tokens flushed in one read) on the log scale


def select(profile: str, plan_args: dict[str, Any], root: Path) -> tuple[Any, list[Any]]:
    """The profile's serving table and the cells calibrate's filters pick (none for the default ``--cells *``)."""
    with reraise_as(UsageError, ValueError):
        conf = sc.load(cfg.find_pyproject(root), profile)
    return conf, pick(conf, plan_args)


def measure(cells: Sequence[Any], conf: Any, runs: int, starts: int, gap_s: float, seed: int | None,
            say: Callable[[str], None] | None = None,
            measure_fn: Callable[..., dict[str, Any]] | None = None) -> tuple[dict[str, Any], float]:
    """values[cell][metric][run] = [(median of the start, the start's per-request values)], and the mean wall
    time of one start (its health wait and its points)."""
    run_all = measure_fn or sc.measure
    values: dict[str, Any] = {c.id: {m: [[] for _ in range(runs)] for m in LATENCIES} for c in cells}
    walls: list[float] = []
    per_run = dataclasses.replace(conf, server_starts=starts)
    for r in range(runs):
        if r and gap_s:
            time.sleep(gap_s)
        t0 = time.monotonic()
        out = run_all(list(cells), per_run, None, seed=None if seed is None else seed + r, say=say)
        n_starts = max((len(v.replicates) for v in out.values()), default=0)
        walls.append((time.monotonic() - t0) / max(n_starts, 1) / max(len({c.server_key for c in cells}), 1))
        for cid, cr in out.items():
            if cr.error:
                raise UsageError(f"{cid}: {cr.error.splitlines()[0]}")
            for rep in cr.replicates:
                for m in LATENCIES:
                    g = [max(float(v), _FLOOR_MS) for v in rep.result["samples"].get(f"{m}_ms", [])]
                    if g:
                        values[cid][m][r].append((float(np.median(g)), g))
    return values, float(np.mean(walls))


def report(values: dict[str, Any], config: Any, starts: int, start_wall_s: float, gate_starts: int) -> dict[str, Any]:
    rep = decompose({c: {m: v for m, v in per.items() if all(v)} for c, per in values.items()}, config, starts,
                    start_wall_s, gate_workers=gate_starts)
    return {**rep, "replicate": "server start", "gate_server_starts": gate_starts}


def format_lines(rep: dict[str, Any]) -> list[str]:
    return [f"serving cells: a replicate is a server start ('process' reads 'start'; {rep['workers']} starts per "
            f"run, {rep['process_wall_s']:.1f} s per start); gate MDE for server_starts = {rep['gate_server_starts']}"
            " per run; ab pairs are pairs of starts", *format_report(rep)]
