"""The operator diff of a confirmed regression: a few profile pairs of one cell, A and B each in a fresh process of
its own tree (perfsuite.measure.opprofile), after the timed A/B has decided; then the pure diff
(perfsuite.verdict.opdiff), written as JSON with both sides' traces (chrome://tracing and Perfetto open them).

A pair's two processes run at the same time, each with half the cores (``OMP_NUM_THREADS``, unless set). On 2
cores a tiny-llama profile process is ~2 s of imports, ~2 s of model load and ~0.15 s per profiled generation, plus
the reading of the profile (0.3 s for 3 generations; torch's ``key_averages()`` took 4 s of it until 2026-12-06, and
beside a co-tenant 3 pairs took 50-73 s). The diff compares each operator's share of its own process's total, and
both sides run under the same conditions, side by side."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from perfsuite.machine.capabilities import cpu_count
from perfsuite.measure import opprofile
from perfsuite.verdict import opdiff

PAIRS = 5  # profile pairs per cell: about 7 s each for a tiny CPU cell on a quiet 2-core machine
MIN_PAIRS = 3  # the noise of fewer pairs claims nothing
BUDGET_S = 50.0  # a pair is started only if it fits this budget (at least MIN_PAIRS run); 10 s short of issue 38's 60
MARGIN = 1.25  # ... with this margin on the slowest pair so far: a busy neighbour makes pairs uneven


def operator_diff(sides: Mapping[str, Any], cell: dict[str, Any], ratio: float | None, workdir: Path,
                  out_dir: Path | None, *, pairs: int = PAIRS, rng: random.Random | None = None,
                  cache_dir: str | None = None, say: Callable[[str], None] | None = None,
                  budget_s: float = BUDGET_S) -> opdiff.OpDiff:
    """``sides``: {"a": Side, "b": Side}. ``ratio``: the timed A/B's B / A of the cell's regressed metric. With
    ``out_dir``, writes ``opdiff-<cell>.json`` and the traces of the first pair there. Up to ``pairs`` pairs; after
    ``MIN_PAIRS``, a pair starts only if one more (``MARGIN`` times the slowest so far) ends inside ``budget_s``."""
    rng = rng or random.Random()
    t0 = time.monotonic()
    got: list[tuple[dict[str, Any], dict[str, Any]]] = []
    slowest = 0.0
    half = {s: _half_cores(sides[s]) for s in ("a", "b")}
    for i in range(pairs):
        if i >= MIN_PAIRS and time.monotonic() - t0 + MARGIN * slowest > budget_s:
            break
        t_pair = time.monotonic()
        with ThreadPoolExecutor(2) as ex:  # side by side; the first pair's traces are the ones kept
            futs = {s: ex.submit(opprofile.run, half[s.lower()], cell, workdir, f"{cell['id']}-{s}{i}",
                                 cache_dir=cache_dir, trace=i == 0) for s in rng.sample(["A", "B"], 2)}
            prof = {s: f.result() for s, f in futs.items()}
        got.append((prof["A"], prof["B"]))
        slowest = max(slowest, time.monotonic() - t_pair)
        if any("skip" in p or "error" in p for p in prof.values()):
            break  # a side that cannot be profiled will not be profiled by the next pair either
    d = opdiff.diff(got, ratio=ratio)
    seconds = time.monotonic() - t0
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        traces: dict[str, Path] = {}
        for side, prof in zip("AB", got[0] if got else ({}, {}), strict=True):
            src = str(prof.get("trace") or "")
            if src and Path(src).is_file():
                traces[side] = out_dir / f"trace-{cell['id']}-{side}.json"
                shutil.copyfile(src, traces[side])
        (out_dir / f"opdiff-{cell['id']}.json").write_text(json.dumps(
            {"cell": cell["id"], "seconds": seconds, "diff": d.as_dict(), "traces": {k: str(v) for k, v in traces.items()},
             "pairs": [{"A": a, "B": b} for a, b in got]}, indent=1, default=str))
    if say:
        say(f"operator diff of {cell['id']}: {d.verdict}, {len(got)} profile pair(s) in {seconds:.0f} s")
    return d


def _half_cores(side: Any) -> Any:
    """``side`` with ``OMP_NUM_THREADS`` = half this machine's usable cores (at least 1), unless already set."""
    if "OMP_NUM_THREADS" in os.environ or "OMP_NUM_THREADS" in dict(side.env):
        return side
    return dataclasses.replace(side, env=(*side.env, ("OMP_NUM_THREADS", str(max(1, cpu_count() // 2)))))

