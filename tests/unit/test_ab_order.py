"""The A/B loop flips a coin for the order of every pair, and the pair records the order the sides ran in (a fake
worker: no processes, no timing)."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace
from typing import Any

from perfsuite.orchestrate import abloop
from perfsuite.verdict.sequential import ConfidenceSequence


def test_every_pair_flips_a_coin_and_records_the_order_it_ran_in() -> None:
    ran: list[str] = []

    def measure(pl: Any, cell: dict[str, Any], plan: Any, n: int, s: str, metrics: Any, rng: Any) -> Any:
        ran.append(s)
        m = SimpleNamespace(samples={"tpot_ms": [1.0]}, generated_tokens=4, first_tokens=[1])
        return SimpleNamespace(pid=len(ran), perfsuite_file=s, metrics={"tpot": m})

    cells = [{"id": "c0"}, {"id": "c1"}]
    mems = [abloop.Member(c["id"], "tpot", "median_tpot_ms", "median", "tpot_ms", 1.0, 0.01,
                          cs=ConfidenceSequence(0.01)) for c in cells]
    res = abloop.run_pairs({"a": None, "b": None}, {"a": {}, "b": {}}, cells, mems, budget_s=1e9, max_pairs=100,
                           rng=random.Random(3), decide=lambda m: ("open", ""), stop=lambda ms: None,
                           measure=measure)
    assert len(res.pairs) == 200
    orders = [p["order"] for p in res.pairs]
    assert "".join(orders) == "".join(ran).upper()  # each pair's order is the order its sides were measured in
    assert 60 <= orders.count("AB") <= 140 and set(orders) == {"AB", "BA"}  # a coin, not a fixed order
    assert any(x == y for x, y in itertools.pairwise(orders))  # not alternating either
