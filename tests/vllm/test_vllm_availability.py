"""AWQ / tensor-parallel cells skip with vLLM's own reason (config validation, no engine start)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm is not installed")

from perfsuite import models
from perfsuite.backends import create
from perfsuite.cells import Cell, Scenario


def _cell(**kw):
    d = dict(backend="vllm", model="tiny-llama", dtype="float32", scenario=Scenario("s", 1, 64, 32),
             model_dir=models.resolve("tiny-llama").path)
    d.update(kw)
    return Cell(**d)


def test_plain_cell_available():
    assert create(_cell()).availability() is None


def test_awq_reason_is_vllms():
    reason = create(_cell(quantization="awq")).availability()
    assert reason is not None and reason.startswith("vllm 0.")
    # vLLM's words: the random-weight checkpoint has no AWQ quantization config
    assert "awq" in reason.lower() and "config" in reason.lower(), reason


def test_tp2_reason_is_vllms_on_cpu():
    import os

    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or len(os.sched_getaffinity(0)) >= 8:
        pytest.skip("checks the small-CPU verdict")
    reason = create(_cell(tensor_parallel_size=2)).availability()
    assert reason is not None and "NUMA" in reason, reason  # vLLM's CPU worker binding plan


def test_int8_dynamic_reason():
    assert "int8-dynamic" in create(_cell(quantization="int8-dynamic")).availability()


def test_cuda_cell_on_cpu_build():
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("GPU build")
    assert "cuda cell needs a GPU build" in create(_cell(device="cuda")).availability()


def test_large_preset_validates_from_config_only():
    """llama2-7b with load_format=dummy: validated from a config.json alone, nothing materialised."""
    c = Cell("vllm", "llama2-7b", "bfloat16", Scenario("s", 1, 64, 32), options=(("load_format", "dummy"),))
    assert create(c).availability() is None
