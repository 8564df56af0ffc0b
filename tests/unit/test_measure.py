"""The timed loops against a fake backend whose step times are known: rounds, samples and token checks."""

import time

import pytest

from perfsuite import measure
from perfsuite.backends.base import MemoryStats, StepResult


class FakeBackend:
    name = "fake"

    def __init__(self, prefill_s=0.004, decode_s=0.002, short_by=0):
        self.prefill_s, self.decode_s, self.short_by = prefill_s, decode_s, short_by
        self.live = 0
        self.calls = []

    def prefill(self, prompts):
        time.sleep(self.prefill_s)
        self.live += 1
        self.calls.append("prefill")
        return StepResult([len(p) for p in prompts], {"pos": len(prompts[0])})

    def decode(self, state):
        time.sleep(self.decode_s)
        self.calls.append("decode")
        n = 2 - self.short_by
        return StepResult([state["pos"] + 1] * n, {"pos": state["pos"] + 1})

    def release(self, state):
        self.live -= 1

    def reset_peak_memory(self):
        pass

    def memory_stats(self):
        return MemoryStats(peak_rss_bytes=1)

    def info(self):
        return {}


PROMPTS = [[5] * 8, [6] * 8]


def test_tpot_rounds_are_decode_steps_and_prefill_is_untimed():
    b, bench = FakeBackend(prefill_s=0.02, decode_s=0.002), measure.standalone_benchmark("t")
    m = measure.measure_tpot(bench, b, PROMPTS, new_tokens=5, generations=3, warmup=1)
    assert len(m.samples["itl_ms"]) == 3 * 4 and len(m.samples["tpot_ms"]) == 3
    assert max(m.samples["itl_ms"]) < 20  # the 20 ms prefill never lands in a TPOT round
    assert min(m.samples["itl_ms"]) >= 2
    assert b.calls.count("prefill") == 4 and b.live == 0
    assert m.tokens == [[8, 9, 10, 11, 12], [8, 9, 10, 11, 12]]
    assert m.generated_tokens == 2 * 3 * 4


def test_e2e_samples_follow_vllm_definitions():
    b = FakeBackend(prefill_s=0.01, decode_s=0.002)
    m = measure.measure_e2e(measure.standalone_benchmark("e"), b, PROMPTS, new_tokens=4, generations=2, warmup=1)
    s = m.samples
    assert len(s["ttft_ms"]) == len(s["e2el_ms"]) == len(s["tpot_ms"]) == 2 and len(s["itl_ms"]) == 6
    for k in range(2):
        assert s["tpot_ms"][k] == pytest.approx((s["e2el_ms"][k] - s["ttft_ms"][k]) / 3)
        assert s["ttft_ms"][k] >= 10
    agg = m.aggregates(type("C", (), {"scenario": type("S", (), {"batch_size": 2, "prompt_tokens": 8,
                                                                  "new_tokens": 4})()})())
    assert agg["output_throughput_tokens_per_s"] == pytest.approx(2 * 4 / (agg["mean_e2el_ms"] / 1e3))
    assert m.generated_tokens == 2 * 2 * 4 and b.live == 0


def test_ttft_round_is_one_prefill():
    b = FakeBackend(prefill_s=0.003)
    m = measure.measure_ttft(measure.standalone_benchmark("f"), b, PROMPTS, generations=4, warmup=2)
    assert len(m.samples["ttft_ms"]) == 4 and min(m.samples["ttft_ms"]) >= 3 and b.live == 0


def test_wrong_token_count_fails_the_measurement():
    with pytest.raises(measure.TokenCountError, match="decode returned 1 tokens for a batch of 2"):
        measure.measure_tpot(measure.standalone_benchmark("x"), FakeBackend(short_by=1), PROMPTS, 4, 1, 0)
