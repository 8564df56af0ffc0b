"""The one timed generation loop against a fake backend whose step times are known: rounds, samples and token
checks for each test cut from it."""

import time

import pytest

from perfsuite.measure import loop as measure
from perfsuite.measure.backends.base import MemoryStats, NoStepsError, StepBackend, StepResult, WholeBackend


class FakeBackend(StepBackend):
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
SCENARIO_CELL = type("C", (), {"scenario": type("S", (), {"batch_size": 2, "prompt_tokens": 8, "new_tokens": 4})()})()


def test_one_loop_yields_every_test_and_runs_once():
    b = FakeBackend(prefill_s=0.02, decode_s=0.002)
    out = measure.measure_generations(b, PROMPTS, new_tokens=5, generations=3, warmup=1)
    assert set(out) == {"ttft", "tpot", "e2el"}
    # one loop: warm-up + timed generations, not one loop per test
    assert b.calls.count("prefill") == 4 and b.calls.count("decode") == 4 * 4 and b.live == 0
    tp, tt, e2 = out["tpot"], out["ttft"], out["e2el"]
    assert len(tp.rounds_s) == 3 * 4 and len(tp.samples["tpot_ms"]) == 3
    assert len(tt.rounds_s) == len(e2.rounds_s) == 3
    # the prefill is in TTFT and E2EL rounds, never in a TPOT round (which is one decode call)
    assert max(tp.rounds_s) < min(tt.rounds_s) and min(tp.rounds_s) >= 0.002
    assert all(e >= f + 4 * 0.002 for e, f in zip(e2.rounds_s, tt.rounds_s, strict=True))
    assert tp.tokens == e2.tokens == [[8, 9, 10, 11, 12], [8, 9, 10, 11, 12]]
    assert tt.tokens == [[8], [8]]
    assert (tt.generated_tokens, tp.generated_tokens, e2.generated_tokens) == (2 * 3, 2 * 3 * 4, 2 * 3 * 5)


def test_e2e_samples_follow_vllm_definitions():
    b = FakeBackend(prefill_s=0.01, decode_s=0.002)
    m = measure.measure_generations(b, PROMPTS, new_tokens=4, generations=2, warmup=1, wanted=["e2el"])["e2el"]
    s = m.samples
    assert len(s["ttft_ms"]) == len(s["e2el_ms"]) == len(s["tpot_ms"]) == 2 and len(s["itl_ms"]) == 6
    for k in range(2):
        assert s["tpot_ms"][k] == pytest.approx((s["e2el_ms"][k] - s["ttft_ms"][k]) / 3)
        # ITL is token to token: the three intervals of a generation add up to its time after the first token
        assert sum(s["itl_ms"][3 * k:3 * k + 3]) == pytest.approx(s["e2el_ms"][k] - s["ttft_ms"][k])
        assert s["ttft_ms"][k] >= 10
    assert s["e2el_ms"] == [r * 1e3 for r in m.rounds_s]
    agg = m.aggregates(SCENARIO_CELL)
    assert agg["output_throughput_tokens_per_s"] == pytest.approx(2 * 4 / (agg["mean_e2el_ms"] / 1e3))
    assert m.generated_tokens == 2 * 2 * 4 and b.live == 0


def test_ttft_only_job_runs_prefills_alone():
    b = FakeBackend(prefill_s=0.003)
    m = measure.measure_generations(b, PROMPTS, new_tokens=6, generations=4, warmup=2, wanted=["ttft"])["ttft"]
    assert len(m.samples["ttft_ms"]) == 4 and min(m.samples["ttft_ms"]) >= 3 and b.live == 0
    assert "decode" not in b.calls and b.calls.count("prefill") == 6


def test_tpot_is_the_mean_decode_step_of_each_generation():
    b = FakeBackend(prefill_s=0.001, decode_s=0.002)
    m = measure.measure_generations(b, PROMPTS, new_tokens=5, generations=2, warmup=0, wanted=["tpot"])["tpot"]
    steps = m.samples["itl_ms"]
    assert m.samples["tpot_ms"] == pytest.approx([sum(steps[:4]) / 4, sum(steps[4:]) / 4])


def test_wrong_token_count_fails_the_measurement():
    with pytest.raises(measure.TokenCountError, match="decode returned 1 tokens for a batch of 2"):
        measure.measure_generations(FakeBackend(short_by=1), PROMPTS, 4, 1, 0)


def test_unknown_metric_is_named():
    with pytest.raises(ValueError, match=r"unknown metric\(s\) \['tpt'\]"):
        measure.measure_generations(FakeBackend(), PROMPTS, 4, 1, 0, ["tpt"])


class WholeFake(WholeBackend):
    """A backend with no steps: one call returns every token (as vllm.LLM.generate does)."""

    name = "whole-fake"

    def __init__(self, n_back=None):
        self.calls, self.n_back = [], n_back

    def generate(self, prompts, new_tokens):
        self.calls.append(new_tokens)
        time.sleep(0.003)
        return [[len(p) + k for k in range(self.n_back or new_tokens)] for p in prompts]


def test_a_backend_without_steps_is_timed_one_whole_call_per_round():
    b = WholeFake()
    out = measure.measure_generations(b, PROMPTS, new_tokens=4, generations=3, warmup=1, wanted=["e2el"])
    m = out["e2el"]
    assert b.calls == [4] * 4 and len(m.rounds_s) == 3 and min(m.rounds_s) >= 0.003
    # only the whole call is a measurement: no TTFT/ITL/TPOT samples made up from inside it
    assert set(m.samples) == {"e2el_ms"} and m.samples["e2el_ms"] == [r * 1e3 for r in m.rounds_s]
    assert m.tokens == [[8, 9, 10, 11], [8, 9, 10, 11]] and m.generated_tokens == 2 * 3 * 4
    with pytest.raises(ValueError, match="no tpot rounds"):
        measure.measure_generations(b, PROMPTS, new_tokens=4, generations=1, warmup=0, wanted=["tpot"])


def test_a_backend_without_steps_refuses_steps_and_short_generations():
    b = WholeFake(n_back=3)
    assert b.metric_unavailable("e2el") is None and "whole generations only" in b.metric_unavailable("ttft")
    with pytest.raises(NoStepsError, match=r"no prefill/decode steps .*generate\(prompts, new_tokens\)"):
        b.prefill(PROMPTS)
    with pytest.raises(measure.TokenCountError, match=r"generate returned \[3, 3\] tokens"):
        measure.measure_generations(b, PROMPTS, 4, 1, 0, ["e2el"])


def test_step_backend_generate_is_the_greedy_loop():
    b = FakeBackend(prefill_s=0, decode_s=0)
    assert b.generate(PROMPTS, 3) == [[8, 9, 10], [8, 9, 10]] and b.calls == ["prefill", "decode", "decode"]
    assert b.live == 0


def test_an_injected_slowdown_also_slows_generate(monkeypatch):
    from perfsuite.measure.backends import inject

    burned = []
    monkeypatch.setattr(inject, "burn_for", lambda s: burned.append(s))
    b = inject.SlowedDecode(FakeBackend(prefill_s=0, decode_s=0.001), 0.5)
    assert b.generate(PROMPTS, 3) == [[8, 9, 10], [8, 9, 10]] and len(burned) == 2
