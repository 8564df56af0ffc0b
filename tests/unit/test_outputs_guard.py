"""The outputs guard (perfsuite.verdict.outputs): digests of the generated tokens, the first difference, the tolerance
of a backend that is not bit-deterministic, and the message that names the position and both tokens."""

from __future__ import annotations

import pytest

from perfsuite.facts import metrics
from perfsuite.verdict import outputs

GEN = [[5, 9, 9, 17, 3], [7, 7, 1, 2, 4]]  # two prompts, five tokens each


def test_record_keeps_each_generation_digest_and_the_first_tokens() -> None:
    rec = metrics.outputs_record([GEN, GEN, GEN])
    assert rec["agree"] and len(set(rec["digests"])) == 1 and rec["tokens"] == GEN
    other = [GEN[0], [7, 7, 1, 2, 5]]
    assert not metrics.outputs_record([GEN, other])["agree"]
    assert metrics.token_digest(GEN) != metrics.token_digest(other) and len(metrics.token_digest(GEN)) == 16
    merged = metrics.outputs_merge([metrics.outputs_record([GEN]), metrics.outputs_record([GEN]), {}])
    assert merged["agree"] and merged["tokens"] == GEN


def test_same_tokens_pass() -> None:
    assert outputs.check(metrics.outputs_record([GEN]), metrics.outputs_record([GEN, GEN]), "torch").kind == "same"


def test_a_same_cost_change_of_the_chosen_token_fails_naming_the_position_and_both_tokens() -> None:
    changed = [list(GEN[0]), list(GEN[1])]
    changed[1][3] = GEN[1][3] + 1  # argmax + 1 from token 3 of prompt 1 on
    res = outputs.check(metrics.outputs_record([changed]), metrics.outputs_record([GEN]), "torch")
    assert res.kind == "changed" and (res.prompt, res.position, res.baseline_token, res.token) == (1, 3, 2, 3)
    assert res.message == "outputs changed: prompt 1, token 3: 2 in the baselines, 3 in this run"


def test_a_later_generation_that_differs_is_a_change_too() -> None:
    other = [GEN[0], [7, 7, 1, 2, 5]]
    res = outputs.check(metrics.outputs_record([GEN, other]), metrics.outputs_record([GEN, GEN]), "torch")
    assert res.kind == "changed" and "a later generation" in res.message


def test_fewer_tokens_is_a_change() -> None:
    res = outputs.check(metrics.outputs_record([[GEN[0][:3], GEN[1]]]), metrics.outputs_record([GEN]), "torch")
    assert res.kind == "changed" and (res.prompt, res.position, res.token) == (0, 3, None)


def test_no_recorded_outputs_is_unknown_with_the_fix() -> None:
    assert outputs.check(metrics.outputs_record([GEN]), {}, "torch").kind == "unknown"
    assert "re-record" in outputs.check(metrics.outputs_record([GEN]), None, "torch").message
    assert outputs.check({}, metrics.outputs_record([GEN]), "torch").kind == "unknown"


def test_a_backend_with_a_measured_tolerance_is_held_to_its_first_n_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(outputs.TOLERANCE, "fuzzy", (3, "evidence: 40 runs"))
    late = [GEN[0][:4] + [99], GEN[1]]  # differs at position 4, beyond the first 3
    res = outputs.check(metrics.outputs_record([late]), metrics.outputs_record([GEN]), "fuzzy")
    assert res.kind == "same" and "first 3 tokens" in res.message
    early = [[GEN[0][0], 99, *GEN[0][2:]], GEN[1]]
    res = outputs.check(metrics.outputs_record([early]), metrics.outputs_record([GEN]), "fuzzy")
    assert res.kind == "changed" and res.position == 1 and "within the first 3 tokens: evidence: 40 runs" in res.message
    assert outputs.check(metrics.outputs_record([late]), metrics.outputs_record([GEN]), "torch").kind == "changed"  # exact elsewhere
