"""The vllm-llm backend: vllm.LLM.generate with vLLM's defaults, whole generations only.

The engine test starts vLLM with its defaults (torch.compile on the CPU: ~40 s on 2 cores), so it is slow-marked;
the agreement with `vllm bench latency` is benchmarks/vllm_llm_vs_bench_latency.py's job.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm is not installed")

from perfsuite import models
from perfsuite.backends.vllm_common import VllmEngineError
from perfsuite.backends.vllm_engine_args import VllmOptionError
from perfsuite.backends.vllm_llm import VllmLlmBackend
from perfsuite.cells import Cell, Scenario

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


def test_prefill_then_decodes_hand_out_one_generate_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """prefill() is the one generate() call of a generation; decode() hands its tokens out and never goes past n."""
    be = VllmLlmBackend(_cell())
    calls = []
    monkeypatch.setattr(be, "generate", lambda prompts: calls.append(prompts) or [[10, 11, 12, 13, 14, 15],
                                                                                   [20, 21, 22, 23, 24, 25]])
    r = be.prefill([[1] * 16, [2] * 16])
    got = [r.tokens]
    for _ in range(SC.new_tokens - 1):
        r = be.decode(r.state)
        got.append(r.tokens)
    assert got == [[10, 20], [11, 21], [12, 22], [13, 23], [14, 24], [15, 25]] and len(calls) == 1
    with pytest.raises(VllmEngineError, match="past new_tokens=6"):
        be.decode(r.state)


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
