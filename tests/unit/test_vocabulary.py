"""The one metric vocabulary: names in vLLM's spelling, units, direction, producing test, sample key; and every
name the gate accepts or measure writes is one it owns."""

import pytest

from perfsuite.facts import vocabulary
from perfsuite.measure import loop as measure
from perfsuite.verdict import policy


@pytest.mark.parametrize(("name", "unit", "direction", "key"), [
    ("median_tpot_ms", "ms", "lower_is_better", "tpot_ms"),
    ("p99_itl_ms", "ms", "lower_is_better", "itl_ms"),
    ("output_throughput_tokens_per_s", "tokens/s", "higher_is_better", None),
    ("decode_throughput_tokens_per_s", "tokens/s", "higher_is_better", None),
    ("generated_tokens", "tokens", "equal", None),
    ("peak_rss_bytes", "bytes", "lower_is_better", None),
])
def test_describe(name: str, unit: str, direction: str, key: str | None) -> None:
    m = vocabulary.describe(name)
    assert m is not None and (m.unit, m.direction, m.sample_key) == (unit, direction, key)


def test_one_throughput_key_means_one_thing() -> None:
    """test_e2el: output tokens over end-to-end time; test_tpot: decode steps alone, under its own name."""
    cell = type("C", (), {"scenario": type("S", (), {"batch_size": 2, "prompt_tokens": 8, "new_tokens": 5})()})()
    e2el = measure.Measurement("e2el", {"ttft_ms": [4.0], "tpot_ms": [1.0], "itl_ms": [1.0] * 4,
                                        "e2el_ms": [8.0]}).aggregates(cell)
    tpot = measure.Measurement("tpot", {"tpot_ms": [1.0], "itl_ms": [1.0] * 4}).aggregates(cell)
    assert e2el[vocabulary.OUTPUT_THROUGHPUT] == pytest.approx(2 * 5 / 8e-3)
    assert vocabulary.OUTPUT_THROUGHPUT not in tpot
    assert tpot[vocabulary.DECODE_THROUGHPUT] == pytest.approx(2 / 1e-3)
    for agg in (e2el, tpot):
        assert all(vocabulary.describe(k) is not None for k in agg), sorted(agg)


def test_gate_reads_the_vocabulary() -> None:
    assert policy.THROUGHPUT is vocabulary.THROUGHPUT and policy.EXACT_METRICS is vocabulary.EXACT
    for name in vocabulary.THROUGHPUT:
        assert name in policy.METRIC_HELP
    assert vocabulary.sample_key("median_e2el_ms") == "e2el_ms" and vocabulary.sample_key("stats.median") is None


@pytest.mark.parametrize("key, stored", [
    ("median_tpot_ms", True), ("std_itl_ms", True), ("p99_e2el_ms", True), ("min_ttft_ms", True),
    ("median_tpt_ms", False),            # a misspelt base is not a measurement
    ("p99_dispatch_delay_ms", False),    # the load client's own cost, kept beside the cell, not a gated value
    ("peak_rss_bytes", True), ("peak_bytes", False), ("generated_tokens", True),
    (vocabulary.DECODE_THROUGHPUT, True), ("output_throughput", False),
])
def test_history_stores_what_the_vocabulary_names(key: str, stored: bool) -> None:
    assert vocabulary.is_measurement(key) is stored
    if stored and not key.startswith("std_"):
        assert vocabulary.describe(key) is not None  # a gate can name every stored value but std
