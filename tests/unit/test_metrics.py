import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.facts import metrics


def test_vllm_names_and_values():
    s = metrics.summarize("tpot", [1.0, 2.0, 3.0, 4.0])
    assert s == pytest.approx({"mean_tpot_ms": 2.5, "median_tpot_ms": 2.5, "p90_tpot_ms": 3.7, "p99_tpot_ms": 3.97},
                              rel=1e-12)
    assert metrics.summarize("ttft", []) == {}


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_interpolates_between_closest_ranks(xs, q):
    """The method vLLM's bench serve reports (np.percentile's default): rank (n-1)*q/100, linear in between."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    want = s[lo] + (s[hi] - s[lo]) * (pos - lo)
    assert math.isclose(metrics.percentile(xs, q), want, rel_tol=1e-9, abs_tol=1e-9)


def test_percentile_of_nothing_is_nan():
    assert math.isnan(metrics.percentile([], 50))


def test_tpot_definition():
    assert metrics.tpot_ms(e2el_ms=100.0, ttft_ms=7.0, new_tokens=32) == 3.0
