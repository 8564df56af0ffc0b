"""The operator diff (perfsuite.verdict.opdiff) on recorded profile pairs (tests/unit/data/opdiff/, written by
benchmarks/opdiff_fixtures.py --pairs 5 on a 2-core Intel Xeon (AVX-512, VNNI, AMX), 2026-12-05, tiny-llama float32 b1-p64-n32 under
torch.profiler, five pairs of fresh processes each; sleep.json: `--cases sleep` on 2026-12-06, the same machine,
quiet): a claimed change, a spread one, noise, and a change outside the operators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.verdict import opdiff

DATA = Path(__file__).parent / "data" / "opdiff"
# the operators that compute attention, eager or fused (the SDPA kernels, the eager path's matmuls and softmax, and
# repeat_kv's copies of the grouped K/V heads)
ATTENTION = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention", "aten::bmm",
             "aten::baddbmm", "aten::matmul", "aten::softmax", "aten::_softmax", "aten::copy_"}


def pairs(case: str) -> list[tuple[dict, dict]]:
    data = json.loads((DATA / f"{case}.json").read_text())
    return [(p["A"], p["B"]) for p in data["pairs"]]


def test_eager_attention_is_claimed_in_the_attention_operators() -> None:
    d = opdiff.diff(pairs("eager"), ratio=1.15)
    assert d.verdict == "claimed"
    claimed = [r.op for r in d.rows if r.claimed]
    assert "aten::bmm" in claimed and set(claimed) <= ATTENTION, claimed
    grew = max(d.rows, key=lambda r: r.share or 0)  # the operator that took the largest part of the slowdown
    assert grew.op in ATTENTION and grew.claimed, grew
    bmm = next(r for r in d.rows if r.op == "aten::bmm")
    assert bmm.status == "new" and bmm.a_ms == 0 and bmm.b_ms > 0
    gone = next(r for r in d.rows if r.op == "aten::_scaled_dot_product_flash_attention_for_cpu")
    assert gone.status == "gone" and not gone.claimed  # what went away is shown, never claimed as the slowdown
    assert all(r.op in ATTENTION for r in d.rows if r.claimed)
    text = "\n".join(opdiff.lines(d))
    assert "the change is in" in text and "new" in text and "gone" in text and "% of the change" in text


def test_no_grad_blames_no_single_operator_for_most_of_the_change() -> None:
    d = opdiff.diff(pairs("no_grad"), ratio=1.03)
    assert d.verdict in ("claimed", "spread")
    assert not [r for r in d.rows if r.claimed and (r.share or 0) > 0.5], [(r.op, r.share) for r in d.rows]


def test_noise_claims_nothing() -> None:
    """A/A pairs given a ratio as if the timed A/B had confirmed +5 %: every operator's share is its size, none
    exceeds it outside the pairs' noise, so the change is spread; at the profiles' own ratio, nothing either."""
    d = opdiff.diff(pairs("aa"), ratio=1.05)
    assert d.verdict == "spread" and not any(r.claimed for r in d.rows)
    assert "spread over many operators" in "\n".join(opdiff.lines(d))
    assert not any(r.claimed for r in opdiff.diff(pairs("aa")).rows)


def test_a_change_outside_the_operators_is_not_put_on_them() -> None:
    """B sleeps 2 ms in each decode step. Its operators' self time still grew (+43 % in these profiles: cold caches
    and threads after the sleep, a neighbour's work), so at a timed ratio near that the change reads as spread, and no
    operator is claimed. At a timed ratio the operators cannot explain (+540 %; a 20 ms sleep read +587 % in
    tests/confirm/test_confirm_e2e.py, benchmarks/data/opdiff-outside-20261206/) the diff says the change is outside the operators, and shows them at the
    profiles' own ratio instead of scaling each up to a change it did not make."""
    d = opdiff.diff(pairs("sleep"), ratio=1.45)
    assert d.verdict == "spread" and not any(r.claimed for r in d.rows)
    d = opdiff.diff(pairs("sleep"), ratio=6.4)
    assert d.verdict == "outside" and d.extra["ratio_source"] == "profiles"
    assert d.high == pytest.approx(d.low) and 1.2 < d.low < 1.8  # rows at the profiles' own ratio
    text = "\n".join(opdiff.lines(d))
    assert "most of the change is outside the operators' time" in text and "+540.0%" in text
    assert opdiff.diff(pairs("eager"), ratio=1.15).verdict == "claimed"  # operators that explain it stay claimed
    assert opdiff.diff(pairs("aa"), ratio=1.05).verdict == "spread"  # A/A profiles at +5 %: nothing to say outside


def test_not_slower_and_unprofiled() -> None:
    assert opdiff.diff(pairs("aa"), ratio=1.0).verdict == "unclear"
    skip = {"skip": "vllm: not profiled (vLLM runs its model in its engine-core process ...)"}
    d = opdiff.diff([(skip, skip)], ratio=1.2)
    assert d.verdict == "unprofiled" and opdiff.lines(d) == [f"operators: not profiled ({skip['skip']})"]


@pytest.mark.parametrize("case", ["eager", "no_grad", "aa"])
def test_the_fixtures_are_what_their_script_writes(case: str) -> None:
    data = json.loads((DATA / f"{case}.json").read_text())
    assert data["case"] == case and len(data["pairs"]) >= 4
    assert all(p[s]["tool"].startswith("torch.profiler") and p[s]["tokens"] > 0 for p in data["pairs"] for s in "AB")
