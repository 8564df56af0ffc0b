"""The vllm-llm backend: vllm.LLM.generate with vLLM's defaults, whole generations only.

The engine test starts vLLM with its defaults (torch.compile on the CPU: ~40 s on 2 cores), so it is slow-marked;
the agreement with `vllm bench latency` is benchmarks/vllm_llm_vs_bench_latency.py's job.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm is not installed")

from perfsuite.facts import models
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure.backends.vllm_common import VllmEngineError
from perfsuite.measure.backends.vllm_engine_args import VllmOptionError
from perfsuite.measure.backends.vllm_llm import VllmLlmBackend

SC = Scenario("t", 2, 16, 6)


def _cell(**opts) -> Cell:
    return Cell("vllm-llm", "tiny-llama", "float32", SC, model_dir=models.resolve("tiny-llama").path,
                options=tuple(sorted(opts.items())))


def test_only_whole_generations_are_timed() -> None:
    be = VllmLlmBackend(_cell())
    assert be.metric_unavailable("e2el") is None
    for metric in ("ttft", "tpot"):
        reason = be.metric_unavailable(metric)
        assert reason is not None and "LLM.generate()" in reason and metric.upper() in reason


def test_each_round_is_one_generate_call_and_there_are_no_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's loop times one generate() call per generation; prefill()/decode() do not pretend to be steps."""
    from perfsuite.measure import loop as measure
    from perfsuite.measure.backends.base import NoStepsError

    be = VllmLlmBackend(_cell())
    calls = []
    monkeypatch.setattr(be, "generate", lambda prompts, n: calls.append(n) or [[10 + k for k in range(n)]] * 2)
    m = measure.measure_generations(be, [[1] * 16, [2] * 16], SC.new_tokens, 3, 1, ["e2el"])["e2el"]
    assert calls == [SC.new_tokens] * 4 and set(m.samples) == {"e2el_ms"} and len(m.rounds_s) == 3
    with pytest.raises(NoStepsError, match="no prefill/decode steps"):
        be.prefill([[1] * 16])


def test_generate_refuses_another_token_count() -> None:
    be = VllmLlmBackend(_cell())
    be.llm = object()
    with pytest.raises(VllmEngineError, match=r"generates exactly 6 tokens"):
        be.generate([[1] * 16], 5)


def test_step_mode_options_are_refused() -> None:
    with pytest.raises(VllmOptionError, match="engine_core"):
        VllmLlmBackend(_cell(engine_core="process")).availability()


@pytest.mark.slow
def test_llm_generate_with_vllm_defaults() -> None:
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    be = VllmLlmBackend(_cell())
    assert be.availability() is None
    be.load()
    try:
        info = be.info()
        res = info["resolved"]
        assert info["engine_api"].startswith("vllm.LLM.generate")
        assert res["enable_prefix_caching"] is False  # as vllm bench latency sets it
        assert set(info["engine_args"]) == {"skip_tokenizer_init", "trust_remote_code", "dtype", "seed",
                                            "tensor_parallel_size", "quantization", "enable_prefix_caching"}
        prompts = models.prompts(SC.batch_size, SC.prompt_tokens, 2048)
        first = be.generate(prompts)
        assert [len(t) for t in first] == [SC.new_tokens] * SC.batch_size
        assert be.generate(prompts) == first  # greedy
    finally:
        be.close()
    assert be.engine_processes_alive() == []
    left = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before
            and p.status() != psutil.STATUS_ZOMBIE and not any("resource_tracker" in a for a in p.cmdline())]
    assert left == []
