"""From collected perf tests to measured cells. The session fixture (perfsuite.adapters.pytest.hooks.measure) calls
:func:`measure_plan` once: every selected cell in ``worker_processes`` fresh worker processes each, in a random
interleaved order, each running one timed generation loop for all of its cell's selected tests
(perfsuite.measure.loop); each test then records its cell's :class:`CellResult` (perfsuite.adapters.pytest.record).
"""

from __future__ import annotations

import random
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.facts import model_identity
from perfsuite.facts.cells import Cell, cell_of
from perfsuite.facts.vocabulary import TIMED as METRICS
from perfsuite.measure import scheduler
from perfsuite.measure.worker import child, pool
from perfsuite.measure.worker.job import ProcessResult

if TYPE_CHECKING:
    import pytest

    from perfsuite.orchestrate.session import PerfSession

METRIC_OF_TEST = {f"test_{m}": m for m in METRICS}


@dataclass
class CellResult:
    cell: Cell
    processes: list[ProcessResult] = field(default_factory=list)
    skip: str | None = None
    error: str | None = None
    detail: str = ""
    measured_by: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, Any] = field(default_factory=dict)  # metric -> pstats.Stats (--benchmark-cprofile)


@dataclass(frozen=True)
class Plan:
    """What the session measures: cells (in collection order) and the metrics selected for each."""

    cells: tuple[Cell, ...]
    metrics: Mapping[str, tuple[str, ...]]  # cell id -> metrics in METRICS order


def plan_from_items(items: Sequence[pytest.Item]) -> Plan:
    cells: dict[str, Cell] = {}
    metrics: dict[str, set[str]] = {}
    for item in items:
        cell = cell_of(item)
        if cell is None:
            continue
        cells.setdefault(cell.id, cell)
        m = METRIC_OF_TEST.get(getattr(item, "originalname", ""))
        metrics.setdefault(cell.id, set()).update([m] if m else METRICS)
    return Plan(tuple(cells.values()), {k: tuple(m for m in METRICS if m in v) for k, v in metrics.items()})


def measured_by(session: PerfSession, cell: Cell, workers: int, mode: str) -> dict[str, Any]:
    """Everything about *how* a value was measured that must match before two runs are compared."""
    p = session.settings.profile
    return {"profile": p.name, "generations": p.generations, "warmup_generations": p.warmup_generations,
            "worker_processes": workers, "mode": mode, "options_hash": cell.options_hash,
            # one timed generation loop per process (perfsuite.measure.loop) since 2026-12-01; runs without the key were
            # measured with one loop per test, whose TTFT read ~2 % lower here (perfsuite ab, 71 pairs: one loop
            # +1.9 % [-0.0, +3.6]; TPOT +0.3 % [-3.8, +5.6], E2EL -0.1 % [-4.7, +5.3])
            "loop": "generation",
            "model": model_identity.of(cell.model, session.settings.config.cache_dir)}


Progress = Callable[[int, int, str, ProcessResult], None]


def measure_plan(session: PerfSession, plan: Plan, *, once: bool = False, cprofile: bool = False,
                 progress: Progress | None = None, seed: int | None = None) -> dict[str, CellResult]:
    """Every job of the plan, through the one scheduler (perfsuite.measure.scheduler). ``once``: pytest-benchmark is
    disabled -> one process, one generation per cell, to show the workload runs (nothing is timed)."""
    settings = session.settings
    cache = str(settings.config.cache_dir) if settings.config.cache_dir else None
    gens, warm = (1, 0) if once else (settings.profile.generations, settings.profile.warmup_generations)
    results: dict[str, CellResult] = {}
    jobs: list[scheduler.Job] = []
    modes: dict[str, str] = {}
    for cell in plan.cells:
        w = 1 if once else settings.workers_for(cell.backend)
        modes[cell.id] = scheduler.mode_for(cell.backend, w)
        results[cell.id] = CellResult(cell, measured_by=measured_by(session, cell, w, modes[cell.id]))
        jobs += [scheduler.Job(cell, plan.metrics[cell.id], gens, warm, index=i, cache_dir=cache,
                               cprofile=cprofile and i == 0) for i in range(max(w, 1))]

    def collect(n: int, total: int, job: scheduler.Job, pr: ProcessResult) -> None:
        res = results[job.cell.id]
        if pr.skip:
            res.skip = pr.skip
        elif pr.error:
            res.error, res.detail = pr.error, pr.detail
        else:
            res.processes.append(pr)
            res.profiles.update(_profiles(pr))
        if progress:
            progress(n, total, job.cell.id, pr)

    with pool.Pool(pool.this_side(), preload=pool.preload_modules({c.backend for c in plan.cells})) as workers:
        scheduler.run(workers, jobs, random.Random(seed), modes=modes, progress=collect,
                      skip=lambda job: bool(results[job.cell.id].skip or results[job.cell.id].error))
    for res in results.values():
        res.processes.sort(key=lambda p: p.index)
    return results


def _profiles(pr: ProcessResult) -> dict[str, Any]:
    """A worker's cProfile files, read into memory while the pool's folder still exists (the pool removes it)."""
    import pstats

    out: dict[str, Any] = {}
    for m, r in pr.metrics.items():
        if r.cprofile_path:
            try:
                out[m] = pstats.Stats(r.cprofile_path)
            except (OSError, EOFError, TypeError, ValueError):  # a profile is a debugging aid: a bad one is left out
                continue
    return out


def measure_peaks(session: PerfSession, plan: Plan) -> dict[str, Any] | None:
    """Copy bandwidth and matmul peak of the device, measured once when the run starts (in a worker, like every
    other number): the references of each cell's roofline efficiency. None when it could not be measured."""
    cell = plan.cells[0]
    job = {"kind": "peaks", "device": cell.device, "dtype": cell.dtype, "index": 0, "label": "peaks"}
    if session.settings.workers_for(cell.backend) == 0:
        info = child.run_job(job, Path(tempfile.gettempdir())).get("backend_info") or {}
    else:
        with pool.Pool(pool.this_side(), preload=pool.preload_modules({cell.backend})) as workers:
            pr = workers.measure(job, fork=True, timeout_s=300, keep_failed=False)
        info = pr.backend_info if not pr.error else {}
        if pr.error:
            session.notes.append(f"perfsuite: the {cell.device} peaks were not measured ({pr.error}); the cells have"
                                 " no roofline efficiency in this run")
    peaks = info.get("peaks")
    return dict(peaks) if isinstance(peaks, dict) else None


def process_entry(p: ProcessResult, metric: str) -> dict[str, Any]:
    m = p.metrics[metric]
    return {"index": p.index, "pid": p.pid, "load_s": round(p.load_s, 4), "wall_s": round(p.wall_s, 4),
            "samples": m.samples, "generated_tokens": m.generated_tokens, **m.memory}


def pooled_samples(procs: Sequence[ProcessResult], metric: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for p in procs:
        for k, v in p.metrics[metric].samples.items():
            out.setdefault(k, []).extend(v)
    return out


def describe_process(p: ProcessResult) -> str:
    if p.skip:
        return f"skipped: {p.skip}"
    if p.error:
        return f"failed: {p.error}"
    m = p.metrics.get("tpot") or next(iter(p.metrics.values()), None)
    if m is None:
        return "no metrics"
    key = next((k for k in ("tpot_ms", "ttft_ms", "e2el_ms") if k in m.samples), None)
    if key is None:
        return ""
    return f"median {key[:-3]} {statistics.median(m.samples[key]):.3f} ms, load {p.load_s:.2f} s"
