"""The A/B's budget rule with a fake clock and fake pair durations: never more than one pair past the budget,
whatever the machine does to the pair durations (no timing of real work here)."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace
from typing import Any

import pytest

from perfsuite.orchestrate import abloop
from perfsuite.verdict.sequential import ConfidenceSequence


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeWorker:
    """What a worker returns: one process's samples (pure numbers), advancing the fake clock by a half pair."""

    def __init__(self, clock: Clock, durations: Any) -> None:
        self.clock, self.durations = clock, durations

    def __call__(self, pl: Any, cell: dict[str, Any], plan: Any, n: int, s: str, metrics: Any, rng: Any) -> Any:
        self.clock.t += next(self.durations) / 2

        m = SimpleNamespace(samples={"tpot_ms": [1.0 + rng.random() * 0.01]}, generated_tokens=4, first_tokens=[1])
        return SimpleNamespace(pid=1, perfsuite_file="x", metrics={"tpot": m})


def run(durations: list[float], budget: float, cells: int = 3) -> tuple[abloop.PairRun, float]:
    clock = Clock()
    cs = [{"id": f"c{i}"} for i in range(cells)]
    mems = [abloop.Member(c["id"], "tpot", "median_tpot_ms", "median", "tpot_ms", 1.0, 0.01,
                          cs=ConfidenceSequence(0.01)) for c in cs]
    res = abloop.run_pairs({"a": None, "b": None}, {"a": {}, "b": {}}, cs, mems, budget_s=budget, max_pairs=10_000,
                           rng=random.Random(1), decide=lambda m: ("open", ""), stop=lambda ms: None, clock=clock,
                           measure=FakeWorker(clock, itertools.chain(durations, itertools.repeat(durations[-1]))))
    return res, clock.t


@pytest.mark.parametrize("durations", [
    [2.0] * 30 + [9.0] * 100,  # the machine slows down mid-run (the 51 s overrun: pairs of 2 s, then 6-9 s)
    [9.0] * 3 + [2.0] * 100,  # slow start (zygote, model load), then fast
    [1.0, 8.0] * 100,  # alternating
    [0.5] * 40 + [30.0] * 10,  # a sudden stall
])
@pytest.mark.parametrize("budget", [60.0, 120.0, 300.0])
def test_never_more_than_one_pair_past_the_budget(durations: list[float], budget: float) -> None:
    res, end = run(durations, budget)
    assert res.stopped == "budget"
    assert end - budget <= max(res.pair_walls), (end, res.pair_walls[-5:])
    assert res.elapsed_s == end and len(res.pairs) == len(res.pair_walls)


def test_the_mean_of_past_pairs_would_overrun_by_more() -> None:
    """The rule the loop used before: predict a round from the mean pair; a slowdown mid-run overran the budget
    by more than a pair (here 14 s on a 100 s budget with 9 s pairs), the slowest-recent rule by less than one."""
    durations = [2.0] * 30 + [9.0] * 100
    walls: list[float] = []
    t = 0.0
    it = iter(durations)
    while True:  # the old loop: a whole round of 3 cells if elapsed + mean * 3 fits
        if walls and t + sum(walls) / len(walls) * 3 > 100:
            break
        for _ in range(3):
            walls.append(next(it))
            t += walls[-1]
    assert t - 100 > 9.0
    res, end = run(durations, 100.0)
    assert end - 100 <= 9.0


def test_first_pair_always_runs_and_stop_reasons() -> None:
    res, _ = run([50.0], 10.0, cells=1)
    assert len(res.pairs) == 1 and res.stopped == "budget"
    clock = Clock()
    cs = [{"id": "c"}]
    mems = [abloop.Member("c", "tpot", "median_tpot_ms", "median", "tpot_ms", 1.0, 0.01, cs=ConfidenceSequence(0.01))]
    done = abloop.run_pairs({"a": None, "b": None}, {"a": {}, "b": {}}, cs, mems, budget_s=100, max_pairs=5,
                            rng=random.Random(0), decide=lambda m: ("refuted", ""), clock=clock,
                            stop=lambda ms: "decided" if all(m.kind != "open" for m in ms) else None,
                            measure=FakeWorker(clock, itertools.repeat(1.0)))
    assert done.stopped == "decided" and len(done.pairs) == 1
    capped = abloop.run_pairs({"a": None, "b": None}, {"a": {}, "b": {}}, cs, mems, budget_s=100, max_pairs=3,
                              rng=random.Random(0), decide=lambda m: ("open", ""), clock=clock, stop=lambda ms: None,
                              measure=FakeWorker(clock, itertools.repeat(1.0)))
    assert capped.stopped == "max-pairs" and len(capped.pairs) == 3


def test_a_budget_stop_closes_the_sequences_a_decided_stop_does_not() -> None:
    """A stop blind to the values (budget, pair cap) spends the fixed-n share; a caller's stop, which looked at
    the values, keeps the sequence's interval alone."""
    res, _ = run([2.0] * 100, 60.0, cells=1)
    assert res.stopped == "budget"
    clock = Clock()
    for stop, closed in ((lambda ms: None, True), (lambda ms: "decided" if ms[0].cs.n >= 4 else None, False)):
        mems = [abloop.Member("c", "tpot", "median_tpot_ms", "median", "tpot_ms", 1.0, 0.01, cs=ConfidenceSequence(0.01))]
        got = abloop.run_pairs({"a": None, "b": None}, {"a": {}, "b": {}}, [{"id": "c"}], mems, budget_s=1e9,
                               max_pairs=8, rng=random.Random(2), decide=lambda m: ("open", ""), stop=stop, clock=clock,
                               measure=FakeWorker(clock, itertools.repeat(1.0)))
        assert got.stopped == ("max-pairs" if closed else "decided")
        assert mems[0].cs.closed is closed
        assert abloop.row(mems[0], 0.01, 0.02, 1.0, 0.8)["interval"] == ("sequence+signed-rank" if closed
                                                                          else "sequence")
