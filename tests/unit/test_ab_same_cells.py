"""abloop.same_cells: two sides are compared only when they measure the same cells alike (the gate's own
MEASURED_ALIKE list), else one UsageError naming the difference and the fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from perfsuite.facts.errors import UsageError
from perfsuite.orchestrate import abloop
from perfsuite.verdict.values import COMPARABLE, MEASURED_ALIKE


def plan(*ids: str, gens: int = 5, warm: int = 1, opts: str = "h1") -> dict[str, Any]:
    return {"profile": "smoke", "generations": gens, "warmup_generations": warm,
            "cells": [{"id": i, "options_hash": opts} for i in ids]}


def test_alike_sides_give_their_cells() -> None:
    assert [c["id"] for c in abloop.same_cells(plan("x", "y"), plan("y", "x"))] == ["x", "y"]
    assert set(MEASURED_ALIKE) <= set(COMPARABLE)  # what an A/B needs alike, the gate needs alike too


@pytest.mark.parametrize("b, needle", [
    (plan("x", "z"), "different cells (only A: y; only B: z)"),
    (plan("x", "y", gens=9), "generations 5 (A) vs 9 (B)"),
    (plan("x", "y", warm=0), "warmup_generations 1 (A) vs 0 (B)"),
    (plan("x", "y", opts="h2"), "cell x: backend options differ between the sides (options_hash h1 vs h2)"),
])
def test_unlike_sides_are_refused_with_the_difference(b: dict[str, Any], needle: str) -> None:
    with pytest.raises(UsageError) as exc:
        abloop.same_cells(plan("x", "y"), copy.deepcopy(b))
    assert needle in str(exc.value)


def test_no_cells_at_all_is_refused() -> None:
    with pytest.raises(UsageError, match="no cell selected"):
        abloop.same_cells(plan(), plan())
