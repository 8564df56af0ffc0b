"""ab's verdict rows name the pytest test whose policy gated the metric: ``test_{m}_under_load[...]`` for a serving
cell (docs/serving.md once listed rows named ``test_ttft[...]`` for them), ``test_{m}[...]`` for an offline one."""

from __future__ import annotations

import math

from perfsuite.orchestrate import abloop
from perfsuite.verdict.sequential import ConfidenceSequence

SERVE = {"id": "vllm-serve-tiny-llama-float32-pc-random-i64-o16-poisson-r4-n16", "backend": "vllm-serve"}
OFFLINE = {"id": "torch-tiny-llama-float32-b1-p64-n32", "backend": "torch"}


def test_test_name_follows_the_cell_kind() -> None:
    assert abloop.test_name(SERVE, "ttft") == f"test_ttft_under_load[{SERVE['id']}]"
    assert abloop.test_name(OFFLINE, "tpot") == f"test_tpot[{OFFLINE['id']}]"


def test_a_serving_row_names_its_under_load_test() -> None:
    m = abloop.Member(SERVE["id"], "ttft", "median_ttft_ms", "median", "ttft_ms", 1.0, 0.01, ConfidenceSequence(0.01),
                      test=abloop.test_name(SERVE, "ttft"))
    for a, b in [(50.0, 51.0), (49.0, 50.5), (52.0, 52.5)]:
        m.cs.update(math.log(b / a))
    r = abloop.row(m, tau=0.05, eps=0.01, pair_s=10.0, power=0.8)
    assert r["test"] == f"test_ttft_under_load[{SERVE['id']}]" and r["metric"] == "median_ttft_ms"


def _side(pid: int, tokens: int, tpot: list[float]):
    from types import SimpleNamespace

    metric = SimpleNamespace(samples={"tpot_ms": tpot}, generated_tokens=tokens, first_tokens=[1, 2, 3])
    return SimpleNamespace(pid=pid, perfsuite_file=f"/t{pid}/perfsuite/__init__.py", metrics={"tpot": metric})


def test_a_pair_whose_sides_generated_other_token_counts_is_refused_before_any_value_is_taken() -> None:
    import pytest

    from perfsuite.facts.errors import UsageError

    m = abloop.Member(OFFLINE["id"], "tpot", "median_tpot_ms", "median", "tpot_ms", 1.0, 0.01, ConfidenceSequence(0.01))
    good = {"a": _side(1, 62, [2.0, 2.1]), "b": _side(2, 62, [2.2, 2.3])}
    rec = abloop.record_pair(1, OFFLINE, ["a", "b"], good, [m])
    assert rec["generated_tokens_equal"] and rec["values"]["tpot:median_tpot_ms"] == {"A": 2.05, "B": 2.25}
    assert m.a_values == [2.05] and m.b_values == [2.25] and m.cs.n == 1
    bad = {"a": _side(1, 62, [2.0]), "b": _side(2, 60, [9.0])}
    with pytest.raises(UsageError, match=r"pair 2, .*generated token counts differ \(A \{'tpot': 62\}, B \{'tpot': 60\}\)"):
        abloop.record_pair(2, OFFLINE, ["b", "a"], bad, [m])
    assert m.a_values == [2.05] and m.b_values == [2.25] and m.cs.n == 1  # the refused pair left nothing behind
