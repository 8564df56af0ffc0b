"""Thread counts for an A/B beside a co-tenant: leave the cores another process holds to it.

A two-tree A/B (``perfsuite ab``, the confirmation of a screened regression) compares A with B measured at the same
time, so a machine that is uniformly slower cancels out. A co-tenant that holds a core is not uniform: a cell whose
OpenMP pool has one thread per core then has more runnable threads than cores, its threads wait for each other at
every barrier, and a pair takes 10-20x its usual time with a spread no budget averages away (measured on the 2-core
EPYC: MDE +104..+135 % after 180 s; docs/gate-evaluation.md). Both sides measured with one thread fewer per busy core
keep the comparison fair (same threads on both sides) and the pairs fast.

A quiet small machine gets one thread per side too: a lockstep pair keeps both workers alive and one waits while the
other generates, so with a pool of one thread per core the waiting side's spinning OpenMP threads take cores from the
side being timed. Measured on the 2-core AMX Xeon (benchmarks/ab_threads.py, docs/gate-evaluation.md, campaign 7b):
one thread per side decided +5 % in 2 minutes 4/4 with a per-pair SD of 5.5-7.0 %, the default threads 3/4 with
9.4-12.5 % (Mann-Whitney p = 0.029). Machines above :data:`SMALL_CPUS` cores keep the cells' default until measured.

Only OpenMP runtimes read ``OMP_NUM_THREADS`` (torch's intra-op pool); ONNX Runtime's own thread pool keeps its size
(the cell's ``threads`` option) and vLLM binds its own threads, which the line of :func:`decide` says.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass

from perfsuite.machine.capabilities import cpu_count as usable_cpus
from perfsuite.machine.preflight import LoadSample, sample_load

MODES = ("auto", "cell")  # or a positive thread count ("1")
BUSY_CORES = 0.25  # the load check's own threshold (preflight.LoadPolicy.max_other_cores)
SMALL_CPUS = 2  # up to this many usable cores an A/B's two sides run with one OpenMP thread each (measured on 2)
_OWN_POOLS = "ONNX Runtime and vLLM cells keep their own threads; thread mode 'cell' measures every cell at its default"


@dataclass(frozen=True)
class ThreadChoice:
    threads: int | None  # OMP_NUM_THREADS given to both sides; None: each cell's own default
    cpus: int
    other_cores: float | None  # what the load sample saw outside this run (None: no sample)
    line: str  # one line for the log and the result

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return () if self.threads is None else (("OMP_NUM_THREADS", str(self.threads)),)

    def as_dict(self) -> dict[str, object]:
        return {"threads": self.threads, "cpus": self.cpus, "other_cores": self.other_cores, "note": self.line}


def decide(sample: LoadSample, environs: Mapping[str, Mapping[str, str]], cpus: int, mode: str = "auto"
           ) -> ThreadChoice:
    """``environs``: each side's environment (a side that fixes OMP_NUM_THREADS itself is not overridden)."""
    fixed_count = parse_mode(mode)
    other = sample.other_cores if sample.available else None
    if mode == "cell":
        return ThreadChoice(None, cpus, other, "threads: each cell's own default (thread mode 'cell')")
    fixed = sorted(side for side, env in environs.items() if env.get("OMP_NUM_THREADS"))
    if fixed:
        return ThreadChoice(None, cpus, other, f"threads: OMP_NUM_THREADS is set for side(s) {', '.join(fixed)}; "
                                               "left as given")
    if fixed_count is not None:
        return ThreadChoice(fixed_count, cpus, other, f"threads: both sides measured with OMP_NUM_THREADS={fixed_count}"
                                                      f" (thread mode '{mode}')")
    busy = other is not None and other > BUSY_CORES
    if not busy and cpus <= SMALL_CPUS:
        seen = sample.describe() if other is None else f"{other:.2f} of {cpus} cores busy outside this run"
        return ThreadChoice(1, cpus, other, (
            f"threads: both sides measured with OMP_NUM_THREADS=1 on this {cpus}-core machine ({seen}): a pair's "
            f"waiting side would otherwise spin on the cores of the side being timed ({_OWN_POOLS})"))
    if other is None:
        return ThreadChoice(None, cpus, None, f"threads: each cell's own default ({sample.describe()})")
    threads = max(1, math.floor(cpus - other + BUSY_CORES))
    if not busy or threads >= cpus:
        leaves = " leaves every core" if busy else ""
        return ThreadChoice(None, cpus, other, f"threads: each cell's own default ({other:.2f} of {cpus} cores busy "
                                               f"outside this run{leaves})")
    return ThreadChoice(threads, cpus, other, (
        f"threads: a co-tenant holds {other:.2f} of {cpus} cores ({sample.describe()}); both sides measured with "
        f"OMP_NUM_THREADS={threads} so that their threads do not wait for a descheduled sibling ({_OWN_POOLS})"))


def parse_mode(mode: str) -> int | None:
    """The thread count a numeric mode fixes (None for ``auto`` / ``cell``); ValueError naming the choices."""
    if mode in MODES:
        return None
    if mode.isdigit() and int(mode) >= 1:
        return int(mode)
    raise ValueError(f"thread mode {mode!r}: expected one of {', '.join(MODES)} or a thread count such as 1")


def choose(environs: Mapping[str, Mapping[str, str]], mode: str = "auto", interval_s: float = 0.5) -> ThreadChoice:
    """Sample this machine's load now (this process tree excluded) and decide. ``environs`` are each side's own
    variables; this process's environment (which the workers inherit) is laid under them."""
    environs = {side: {**os.environ, **env} for side, env in environs.items()}
    sample = LoadSample(False, reason="not sampled") if mode == "cell" else sample_load(interval_s)
    return decide(sample, environs, usable_cpus(), mode)


def hash_seed_env(environs: Mapping[str, Mapping[str, str]], rng: random.Random) -> tuple[tuple[str, str], ...]:
    """One ``PYTHONHASHSEED`` for both sides of an A/B, drawn per run: every worker of a side is forked from that
    side's one zygote and shares its hash seed, so two zygotes of *identical* code differ by a fixed offset for the
    whole run, which no number of pairs averages away. Measured (benchmarks/zygote_effect.py, 8 blocks of 80 lockstep
    A/A pairs, fresh zygotes per block, 2026-12-04): with random seeds the blocks' trimmed means spread 0.62 % against
    0.46 % from their own pairs (Kruskal-Wallis p = 0.0005); with one seed for both, 0.41 % against 0.33 % (p = 0.18).
    A side (or this process) that sets PYTHONHASHSEED itself keeps it, and then nothing is shared (empty result)."""
    if "PYTHONHASHSEED" in os.environ or any("PYTHONHASHSEED" in env for env in environs.values()):
        return ()
    return (("PYTHONHASHSEED", str(rng.randrange(1, 2**32))),)
