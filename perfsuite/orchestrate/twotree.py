"""One two-tree A/B, from two sides to decided members: probe both trees, ask each which cells it selects, refuse
unless they measure alike, then the pair loop (perfsuite.orchestrate.abloop) through one shared zygote. `perfsuite ab`
and each step of `perfsuite bisect` run it; the caller decides what a member's interval means (``decide``) and when
to stop (``stop``)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.orchestrate import abloop


class ABInterrupted(KeyboardInterrupt):
    """Ctrl-C during the pairs (still a KeyboardInterrupt), carrying the A/B as it stood."""

    def __init__(self, result: ABRun) -> None:
        super().__init__("interrupted")
        self.result = result


@dataclass
class ABRun:
    run: abloop.PairRun
    members: list[abloop.Member]
    cells: list[dict[str, Any]]
    plans: dict[str, dict[str, Any]]
    lockstep: bool
    zygote: str  # shared | per-side
    setup_s: float


def prepare(sides: Mapping[str, Any], plan_args: dict[str, Any]
            ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each side's plan (its own tree's cells for ``plan_args``, serving cells included) and probe facts; raises
    perfsuite.measure.worker.pool.SideError for a side that cannot run."""
    from perfsuite.measure.serving import replicate
    from perfsuite.measure.worker import pool

    plans, facts = {}, {}
    for s, side in sides.items():
        pool.probe(side)
        plans[s] = pool.plan(side, plan_args)
        facts[s] = pool.probe(side, ("perfsuite.measure.worker.child",
                                     *pool.preload_modules({c["backend"] for c in plans[s]["cells"]})))
        plans[s]["cells"] += replicate.cells(side, plan_args)  # serving cells: a server start is a replicate
    return plans, facts


def ab(sides: Mapping[str, Any], plans: dict[str, dict[str, Any]], facts: dict[str, dict[str, Any]], config: Any, *,
       budget_s: float, decide: Callable[[abloop.Member], tuple[str, str]],
       stop: Callable[[list[abloop.Member]], str | None], max_pairs: int = 1000, rng: random.Random | None = None,
       zygote: str = "shared", pairs: str = "lockstep", workdir: Path | None = None,
       members: list[abloop.Member] | None = None, select: Callable[[str, str, str], bool] | None = None,
       metrics: Mapping[str, Sequence[str]] | None = None, say: Callable[[str], None] = lambda line: None,
       progress: Callable[[int, float], None] | None = None, started: float | None = None) -> ABRun:
    """The pairs of ``plans``' common cells until ``stop`` or the budget (counted from ``started``, default now);
    ``members``: the gated metrics (default: every statistical policy's, narrowed by ``select``); ``metrics``: what
    each cell's workers measure (default all). A Ctrl-C raises :class:`ABInterrupted` with the pairs so far;
    UsageError when the sides measure differently. ``progress`` gets the pairs so far and the seconds since
    ``started``."""
    from perfsuite.facts.errors import UsageError
    from perfsuite.measure.worker import pool

    started = time.monotonic() if started is None else started
    cells = abloop.same_cells(plans["a"], plans["b"])
    members = members if members is not None else abloop.members(cells, config, config.alpha, select=select)
    if not members:
        raise UsageError("no statistical gate policy applies to the selected cells; check [tool.perfsuite.gate]")
    pools, line = pool.pair_pools(dict(sides), {s: (workdir / f"workers-{s}") if workdir else None for s in sides},
                                  pool.preload_modules({c["backend"] for c in cells}), zygote)
    say(line)
    lockstep, pairing = abloop.pairing(pairs, facts)
    say(pairing)
    setup_s = time.monotonic() - started
    shared = "shared" if pools["a"].zygote is pools["b"].zygote else "per-side"
    say(f"{setup_s:.0f} s of the budget went to the probes and plans; {max(budget_s - setup_s, 0.0):.0f} s left for "
        "pairs")
    try:
        run = abloop.run_pairs(pools, plans, cells, members, budget_s=max(budget_s - setup_s, 0.0),
                               max_pairs=max_pairs, rng=rng or random.Random(), decide=decide, stop=stop,
                               lockstep=lockstep, metrics=metrics,
                               progress=progress and (lambda n, elapsed: progress(n, elapsed + setup_s)))
    except abloop.PairsInterrupted as exc:  # Ctrl-C: the pairs measured so far are kept (a half pair is not one)
        raise ABInterrupted(ABRun(exc.run, members, cells, plans, lockstep, shared, setup_s)) from None
    finally:
        for pl in pools.values():
            pl.close()
    return ABRun(run, members, cells, plans, lockstep, shared, setup_s)
