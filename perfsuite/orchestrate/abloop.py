"""The randomized-pair loop of a two-tree A/B, shared by ``perfsuite ab`` and the in-session confirmation
(perfsuite.orchestrate.confirm); docs/gate.md, "perfsuite ab".

Each pair measures one cell once on A and once on B in fresh worker processes of each side's own tree (lockstep:
perfsuite.measure.lockstep, else one after the other in coin-flip order); every gated (cell, metric) is a
:class:`Member` whose confidence sequence gets ``log(B / A)`` of the pair. :func:`run_pairs` is given the clock so
that tests drive it with fake durations.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsuite.facts import vocabulary
from perfsuite.facts.cells import cell_from_dict
from perfsuite.facts.errors import UsageError
from perfsuite.measure import lockstep, scheduler
from perfsuite.verdict import sequential, stats
from perfsuite.verdict.confirm_decision import interval_text
from perfsuite.verdict.estimate import sign
from perfsuite.verdict.policy import _LAT
from perfsuite.verdict.values import MEASURED_ALIKE


@dataclass
class Member:
    """One gated (cell, metric) of the A/B and its confidence sequence."""

    cell_id: str
    test_metric: str  # ttft | tpot | e2el: what the worker measures
    metric: str  # policy metric, e.g. median_tpot_ms
    stat: str  # median / mean / p90 ...
    sample_key: str  # tpot_ms ...
    sign: float  # +1 when larger is worse
    alpha: float  # its Bonferroni share of the family's alpha
    cs: sequential.ConfidenceSequence  # at level ``alpha``
    kind: str = "open"
    note: str = ""
    threshold: float | None = None  # the policy's relative threshold (the confirmation decides against it)
    test: str = ""  # the pytest test the policy gates (test_tpot[...], test_tpot_under_load[...])
    a_values: list[float] = field(default_factory=list)
    b_values: list[float] = field(default_factory=list)
    early: tuple[float, float, int] | None = None  # refuted by a first stage: its (low, high) log interval, pairs


def all_decided(ms: list[Member]) -> str | None:
    """A ``stop`` for run_pairs: ``"decided"`` once no member is open."""
    return "decided" if all(m.kind != "open" for m in ms) else None


def test_name(cell: Mapping[str, Any], metric: str) -> str:
    """The pytest test whose policies gate ``metric`` of ``cell`` (serving cells: ``test_{m}_under_load``)."""
    under_load = "_under_load" if cell.get("backend") == "vllm-serve" else ""
    return f"test_{metric}{under_load}[{cell['id']}]"


# The samples a worker measuring each metric records (a policy on another sample does not apply to it).
SAMPLES_OF = {"ttft": {"ttft"}, "tpot": {"tpot", "itl"}, "e2el": {"ttft", "tpot", "itl", "e2el"}}


def members(cells: Sequence[dict[str, Any]], config: Any, alpha: float,
            select: Callable[[str, str, str], bool] | None = None) -> list[Member]:
    """The statistical latency policies of ``cells`` (``select(cell_id, test_metric, metric)`` narrows them), each
    with a Bonferroni share of ``alpha``: valid for any stopping rule."""
    found: list[tuple[Any, ...]] = []
    for c in cells:
        for m in vocabulary.TIMED:
            for pol in config.policies_for(c["id"], test_name(c, m)):
                lat = _LAT.match(pol.metric)
                if not pol.exact and lat and lat.group(2) in SAMPLES_OF[m] and (
                        select is None or select(c["id"], m, pol.metric)):
                    found.append((c, m, pol, lat))
    per = alpha / max(len(found), 1)
    return [Member(c["id"], m, pol.metric, lat.group(1), f"{lat.group(2)}_ms", sign(pol), per,
                   sequential.ConfidenceSequence(per, looks=sequential.FEW_LOOKS if scheduler.few_pairs(
                       str(c.get("backend", ""))) else ()), threshold=pol.threshold, test=test_name(c, m))
            for c, m, pol, lat in found]


@dataclass
class PairRun:
    pairs: list[dict[str, Any]]
    stopped: str  # budget | decided | regression | max-pairs | a caller's reason
    elapsed_s: float
    pair_walls: list[float]

    def pair_s(self, n_cells: int) -> float:
        """Mean wall time of one round (one pair of every cell)."""
        return sum(self.pair_walls) / max(len(self.pair_walls), 1) * n_cells


# Stops whose pair count does not depend on the measured values: at them a member's confidence sequence is closed
# and its interval also uses the fixed-n signed-rank test (perfsuite.verdict.sequential). A caller's stop ("decided",
# "regression") looked at the values, and Ctrl-C may have: those keep the sequence's interval alone.
VALUE_BLIND_STOPS = frozenset({"budget", "max-pairs"})


class PairsInterrupted(KeyboardInterrupt):
    """Ctrl-C inside :func:`run_pairs` (still a KeyboardInterrupt), carrying the whole pairs measured before it."""

    def __init__(self, run: PairRun) -> None:
        super().__init__("interrupted")
        self.run = run


def same_cells(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells two sides' plans (measure.worker.pool.plan) both select, refused (UsageError) unless they select
    the same ones, measure them with the same generations and warm-up and with the same backend options."""
    ca = {c["id"]: c for c in a["cells"]}
    cb = {c["id"]: c for c in b["cells"]}
    if not ca and not cb:
        raise UsageError("no cell selected on either side; check --profile/--backend/--model/--cells")
    if set(ca) != set(cb):
        only_a, only_b = sorted(set(ca) - set(cb)), sorted(set(cb) - set(ca))
        raise UsageError(f"the sides select different cells (only A: {', '.join(only_a) or '-'}; only B: "
                         f"{', '.join(only_b) or '-'}); use --cells to pick the common ones")
    for key in MEASURED_ALIKE:  # the gate's own list: what "measured alike" means
        if key in a or key in b:  # a plan-level key (generations, warm-up)
            if a.get(key) != b.get(key):
                raise UsageError(f"the sides measure differently: {key} {a.get(key)} (A) vs {b.get(key)} (B) in "
                                 f"profile {a['profile']}; compare like with like (align [tool.perfsuite.profiles])")
            continue
        for cid in ca:  # a cell-level key (the options hash)
            if ca[cid].get(key) != cb[cid].get(key):
                raise UsageError(f"cell {cid}: backend options differ between the sides ({key} {ca[cid].get(key)} "
                                 f"vs {cb[cid].get(key)}); a change of options is not a code change: align "
                                 "[tool.perfsuite.backend_options]")
    return list(ca.values())


def pairing(asked: str, facts: dict[str, dict[str, Any]]) -> tuple[bool, str]:
    """Whether pairs run in lockstep, and the line that says so (a tree from before lockstep pairs cannot)."""
    if asked == "sequential":
        return False, "pairs: sequential (--pairs sequential): one worker after the other"
    old = [s.upper() for s in ("a", "b") if not lockstep.supported(facts.get(s) or {})]
    if old:
        return False, (f"pairs: sequential: side {' and '.join(old)}'s tree predates lockstep pairs (its workers "
                       "cannot take turns); drift between a pair's two processes is not cancelled; when A is the "
                       "stored baselines' commit, re-record them at a current commit (`perfsuite run "
                       "--update-baselines`, README: Baselines) and the A/B pairs in lockstep")
    return True, "pairs: lockstep: both workers of a pair alive together, taking turns generation by generation"


def measure_side(pl: Any, cell: dict[str, Any], plan: dict[str, Any], n: int, s: str, metrics: Sequence[str],
                 rng: random.Random) -> Any:
    if cell["backend"] == "vllm-serve":  # a server start from the side's own tree (perfsuite.measure.serving.replicate)
        from perfsuite.measure.serving.replicate import measure_or_fail

        return measure_or_fail(pl.side, cell, plan["profile"], n, s.upper())
    return _checked(scheduler.measure(pl, _job(cell, plan, n, s, metrics)), s, n, cell["id"])


# Timed generations per side in one pair of a cell whose A/B decides on few pairs (scheduler.few_pairs: vLLM). There
# a pair's spread is mostly its generations': log TPOT varies 0.9-6.2 % (median ~3 %) from one generation to the next
# inside a vLLM process (the committed baselines' per-process samples), so the 5 of the smoke profile left a pair's
# log(B/A) at ~2 % (benchmarks/data/vllm-ab-20261206/gens5/), too wide for 4 or 5 pairs. 30 cost ~6 s more a pair
# (a round of both sides is ~0.25 s against an engine start of ~30 s) and narrow it by about sqrt(6).
FEW_PAIRS_GENERATIONS = 30


def _job(cell: dict[str, Any], plan: dict[str, Any], n: int, s: str, metrics: Sequence[str]) -> Any:
    gens = plan["generations"]
    if scheduler.few_pairs(str(cell.get("backend", ""))):
        gens = max(gens, FEW_PAIRS_GENERATIONS)
    return scheduler.Job(cell_from_dict(cell), tuple(metrics), gens, plan["warmup_generations"], index=n,
                         label=s.upper())


def _checked(pr: Any, s: str, n: int, cell_id: str) -> Any:
    if pr.skip:
        raise UsageError(f"side {s.upper()} cannot run {cell_id}: {pr.skip}")
    if pr.error:
        raise UsageError(f"side {s.upper()}, pair {n}, {cell_id}: worker failed: {pr.error}")
    return pr


def measure_lockstep(pools: dict[str, Any], cell: dict[str, Any], plans: dict[str, dict[str, Any]], n: int,
                     metrics: Sequence[str], rng: random.Random) -> tuple[list[str], dict[str, Any], list[str]]:
    """One lockstep pair of ``cell`` (scheduler.measure_pair): (start order, results, round orders)."""
    jobs = {s: _job(cell, plans[s], n, s, metrics) for s in ("a", "b")}
    try:
        pr = scheduler.measure_pair(pools, jobs, rng)
    except lockstep.LockstepError as exc:  # a side never ready (a hung load) or no longer taking turns: one line
        raise UsageError(f"pair {n}, {cell['id']}: the lockstep pair failed: {exc}; run the A/B with --pairs "
                         "sequential to see that side's own error") from None
    got = {s: _checked(pr.results[s], s, n, cell["id"]) for s in ("a", "b")}
    return [pr.first, "b" if pr.first == "a" else "a"], got, pr.rounds


def record_pair(n: int, cell: dict[str, Any], order: list[str], got: dict[str, Any], mems: list[Member]
                ) -> dict[str, Any]:
    tok_a, tok_b = ({k: v.generated_tokens for k, v in got[s].metrics.items()} for s in ("a", "b"))
    if tok_a != tok_b:  # before any value is taken: a refused pair leaves the members as they were
        raise UsageError(f"pair {n}, {cell['id']}: generated token counts differ (A {tok_a}, B {tok_b}): the "
                         "sides do not run the same workload")
    rec: dict[str, Any] = {"pair": n, "cell": cell["id"], "order": "".join(o.upper() for o in order),
                           "pid": {s.upper(): got[s].pid for s in got},
                           "perfsuite_file": {s.upper(): got[s].perfsuite_file for s in got}, "values": {}}
    for m in [m for m in mems if m.cell_id == cell["id"]]:
        a, b = (stats.statistic(got[s].metrics[m.test_metric].samples[m.sample_key], m.stat) for s in ("a", "b"))
        m.a_values.append(a)
        m.b_values.append(b)
        m.cs.update(m.sign * math.log(b / a))
        rec["values"][f"{m.test_metric}:{m.metric}"] = {"A": a, "B": b}
    rec["generated_tokens_equal"] = True  # a field of the pair record (ab --json); unequal counts are refused above
    rec["first_tokens_equal"] = all(got["a"].metrics[k].first_tokens == got["b"].metrics[k].first_tokens
                                    for k in got["a"].metrics)
    return rec


Measure = Callable[[Any, dict[str, Any], dict[str, Any], int, str, Sequence[str], random.Random], Any]


def run_pairs(pools: dict[str, Any], plans: dict[str, dict[str, Any]], cells: Sequence[dict[str, Any]],
              mems: list[Member], *, budget_s: float, max_pairs: int, rng: random.Random,
              decide: Callable[[Member], tuple[str, str]], stop: Callable[[list[Member]], str | None],
              metrics: Mapping[str, Sequence[str]] | None = None, progress: Callable[[int, float], None] | None = None,
              clock: Callable[[], float] = time.monotonic, measure: Measure = measure_side,
              lockstep: bool = False) -> PairRun:
    """Rounds of one pair per cell (cells in random order) until ``stop(members)`` names a reason, ``max_pairs``
    rounds are done, or the next pair would not fit the budget. ``decide(member)`` gives ``(kind, note)`` after
    every round ("open" while undecided). ``metrics``: what each cell's workers measure (default all).
    ``lockstep``: pairs in lockstep (both trees must support it); otherwise one after the other via ``measure``."""
    pairs: list[dict[str, Any]] = []
    walls: list[float] = []
    t0 = clock()
    stopped = "max-pairs"
    try:
        for n in range(1, max_pairs + 1):
            out_of_budget = False
            for cell in rng.sample(list(cells), len(cells)):
                # The first pair always runs; then one starts only if the slowest of the last 6 would still end
                # inside the budget, so the last one started ends less than one pair past it (the mean of past pairs
                # overran 2 min by 51 s when the machine slowed down mid-run).
                if walls and clock() - t0 + max(walls[-6:]) > budget_s:
                    out_of_budget = True
                    break
                what = (metrics or {}).get(cell["id"], vocabulary.TIMED)
                tp = clock()
                rounds: list[str] | None = None
                if lockstep and cell.get("backend") != "vllm-serve":  # a serving replicate is a server start
                    order, got, rounds = measure_lockstep(pools, cell, plans, n, what, rng)
                else:
                    order = ["a", "b"] if rng.random() < 0.5 else ["b", "a"]
                    got = {s: measure(pools[s], cell, plans[s], n, s, what, rng) for s in order}
                walls.append(clock() - tp)
                pairs.append({**record_pair(n, cell, order, got, mems), "lockstep": rounds is not None,
                              **({"rounds": "".join(r[0] for r in rounds)} if rounds else {})})
            for m in mems:
                m.kind, m.note = decide(m)
            if progress is not None:
                progress(n, clock() - t0)
            if reason := ("budget" if out_of_budget else stop(mems)):
                stopped = reason
                break
    except KeyboardInterrupt:  # the pairs done so far stand; a pair cut in half is not one
        for m in mems:
            m.kind, m.note = decide(m)
        raise PairsInterrupted(PairRun(pairs, "interrupted", clock() - t0, walls)) from None
    if stopped in VALUE_BLIND_STOPS:  # the pair count did not depend on the values: spend the fixed-n share
        for m in [m for m in mems if m.cs.n]:
            m.cs.close()
            m.kind, m.note = decide(m)
    return PairRun(pairs, stopped, clock() - t0, walls)


def pct(x: float) -> str:
    """A log-scale change as a relative one."""
    return vocabulary.pct(math.expm1(x) if math.isfinite(x) else x, digits=2)


def progress_line(n: int, elapsed: float, budget: float, mems: list[Member]) -> str:
    parts = []
    for m in mems:
        if m.test_metric == "tpot" or len(mems) <= 3:
            lo, hi = m.cs.interval()
            parts.append(f"{m.metric} {pct(m.cs.estimate())} {interval_text(math.expm1(lo), math.expm1(hi), 2)} "
                         f"{m.kind}")
    return f"pair {n}, {elapsed:.0f}/{budget:.0f} s: " + "; ".join(parts[:4])


def row(m: Member, tau: float, eps: float, pair_s: float, power: float) -> dict[str, Any]:
    """The verdict row of one member; an undecided one gets the MDE reached and the pairs that would settle it."""
    lo, hi = m.early[:2] if m.early is not None else m.cs.interval()  # ended at a look: that look's interval
    kind = "inconclusive" if m.kind == "open" else m.kind
    change = math.expm1(m.sign * m.cs.estimate()) if m.cs.n else None
    row: dict[str, Any] = {"cell": m.cell_id, "test": m.test or f"test_{m.test_metric}[{m.cell_id}]",
                           "metric": m.metric, "verdict": kind, "kind": kind, "change": change,
                           "ratio": None if change is None else 1 + change,
                           "ci_low": math.expm1(lo), "ci_high": math.expm1(hi),
                           "pairs": m.early[2] if m.early is not None else m.cs.n, "alpha": m.alpha,
                           "note": m.note, "a_values": m.a_values, "b_values": m.b_values,
                           "interval": "sequence+t-looks" if m.cs.looks else
                           "sequence+signed-rank" if m.cs.closed else "sequence"}
    if kind == "inconclusive":
        mde = sequential.mde_reached(m.cs, power)
        more = sequential.pairs_to_settle(m.cs, tau, eps)
        row.update(mde=math.expm1(mde) if math.isfinite(mde) else None, settle_pairs=more,
                   settle_budget_s=None if more is None else more * pair_s)
        settle = (f"about {row['settle_budget_s'] / 60:.0f} min ({more} pairs) would settle it" if more
                  else "no budget in reach would settle it at this spread")
        row["note"] = f"MDE reached {pct(mde)}; {settle}"
    return row
