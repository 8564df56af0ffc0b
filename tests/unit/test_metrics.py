import math

from hypothesis import given
from hypothesis import strategies as st

from perfsuite import metrics


def test_vllm_names_and_values():
    s = metrics.summarize("tpot", [1.0, 2.0, 3.0, 4.0])
    assert s == {"mean_tpot_ms": 2.5, "median_tpot_ms": 2.5, "p90_tpot_ms": 3.7, "p99_tpot_ms": 3.97}
    assert metrics.summarize("ttft", []) == {}


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy_linear(xs, q):
    import numpy as np

    assert math.isclose(metrics.percentile(xs, q), float(np.percentile(xs, q)), rel_tol=1e-9, abs_tol=1e-9)


def test_tpot_definition():
    assert metrics.tpot_ms(e2el_ms=100.0, ttft_ms=7.0, new_tokens=32) == 3.0
