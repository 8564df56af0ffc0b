"""The one scheduler. Every way of measuring (the pytest session: perfsuite.orchestrate.plan; ``perfsuite ab`` and
the in-session confirmation: perfsuite.orchestrate.abloop; ``perfsuite calibrate``) turns its work into
:class:`Job` s measured here: one job is one fresh worker process of one tree (perfsuite.measure.worker) that runs
the cell's one timed generation loop; the scheduler orders the jobs, spawns their processes and collects one
ProcessResult per job. Workers time, nothing here does; the gate reads the results and never knows which caller
measured them.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.facts.cells import Cell
from perfsuite.measure.lockstep import Conductor, LockstepError
from perfsuite.measure.worker.job import ProcessResult


@dataclass(frozen=True)
class Job:
    """One worker process's work: ``cell`` measured for ``metrics`` (vocabulary.TIMED) in one generation loop."""

    cell: Cell
    metrics: tuple[str, ...]
    generations: int
    warmup: int
    index: int = 0  # the replicate's number (within its cell, its run or its pair)
    cache_dir: str | None = None
    cprofile: bool = False
    label: str = ""  # the side of an A/B ("A" / "B"); "" otherwise

    def wire(self) -> dict[str, Any]:
        from perfsuite.measure.worker.job import make_job

        return make_job(self.cell, list(self.metrics), generations=self.generations, warmup=self.warmup,
                        cache_dir=self.cache_dir, index=self.index, cprofile=self.cprofile, label=self.label)


def mode_for(backend: str, workers: int) -> str:
    """How a cell's jobs run: ``inprocess`` (workers = 0: in this process, for debugging), ``fork`` (from the
    pre-imported zygote) or ``spawn`` (a fresh interpreter: vLLM starts engine processes and threads of its own)."""
    return "inprocess" if workers == 0 else ("spawn" if backend.startswith("vllm") else "fork")


def freezes(backend: str) -> bool:
    """Whether a lockstep pair of this backend stops its waiting side (perfsuite.measure.lockstep, "Freezing"): vLLM,
    whose idle engine polls busily; a torch or ONNX Runtime worker waiting for its turn is blocked, not busy."""
    return backend.startswith("vllm")


def few_pairs(backend: str) -> bool:
    """Whether an A/B pair of this backend is an engine start per side (vLLM's engine: ~32 s a lockstep pair on 2
    cores, benchmarks/data/vllm-lockstep-20261206/), so that its A/B decides on a few pairs
    (perfsuite.verdict.sequential, "Few pairs"). A serving cell's pair is a server start per side, in sequence."""
    return backend.startswith("vllm") and backend != "vllm-serve"


def measure(workers: Any, job: Job, mode: str | None = None) -> ProcessResult:
    """One job in one fresh worker process of ``workers``' tree (a :class:`perfsuite.measure.worker.pool.Pool`)."""
    from perfsuite.measure.worker import child

    mode = mode or mode_for(job.cell.backend, 1)
    if mode == "inprocess":
        raw = child.run_job(job.wire(), workers.workdir)
        return ProcessResult.from_wire(raw, pid=int(raw.get("pid", 0)), wall_s=0.0)
    return workers.measure(job.wire(), fork=mode == "fork")


Progress = Callable[[int, int, Job, ProcessResult], None]


def run(workers: Any, jobs: Sequence[Job], rng: random.Random, *, modes: dict[str, str] | None = None,
        skip: Callable[[Job], bool] | None = None, progress: Progress | None = None
        ) -> list[tuple[Job, ProcessResult]]:
    """Every job in one random interleaved order (so slow drift of the machine falls on every cell), each in a
    fresh worker; ``modes``: cell id -> :func:`mode_for`; ``skip(job)``: leave a job out (its cell already failed).
    Returns (job, result) in the order measured."""
    order = list(jobs)
    rng.shuffle(order)
    out: list[tuple[Job, ProcessResult]] = []
    for n, job in enumerate(order, 1):
        if skip is not None and skip(job):
            continue
        pr = measure(workers, job, (modes or {}).get(job.cell.id))
        out.append((job, pr))
        if progress is not None:
            progress(n, len(order), job, pr)
    return out


@dataclass
class PairResult:
    """Both sides of one lockstep pair: ``first`` started first; ``rounds`` the order of each round of turns."""

    results: dict[str, ProcessResult]
    first: str
    rounds: list[str]


def measure_pair(pools: dict[str, Any], jobs: dict[str, Job], rng: random.Random) -> PairResult:
    """One lockstep pair: ``jobs[side]`` in a fresh worker of ``pools[side]`` each, started in coin-flip order;
    both load at once, then take turns (perfsuite.measure.lockstep): every round of generations runs both sides, its
    order a coin flip, so drift over seconds lands on both. (Sequential pairs are two :func:`measure` calls.)"""
    order = list(jobs)
    rng.shuffle(order)
    with Conductor(order, freeze=any(freezes(j.cell.backend) for j in jobs.values())) as cond:
        running: dict[str, Any] = {}
        try:
            for s in order:
                fork = mode_for(jobs[s].cell.backend, 1) == "fork"
                running[s] = pools[s].start({**jobs[s].wire(), "lockstep": cond.address(s)}, fork=fork)
                cond.track(s, running[s].pid)
            ready = cond.wait_ready(lambda s: running[s].ended())
            orders: list[str] = []
            if len(ready) == len(order):  # else a side ended before its first generation: its result says why
                # a side that dies mid-run: the others run freely to their end; its result (or status) says why
                with contextlib.suppress(LockstepError):
                    orders = cond.run_rounds({s: jobs[s].warmup + jobs[s].generations for s in ready}, rng)
            cond.release()
            return PairResult({s: running[s].finish() for s in order}, order[0], orders)
        except BaseException:
            for r in running.values():
                r.kill()
            for r in running.values():
                with contextlib.suppress(Exception):
                    r.finish()
            raise
