"""Availability of vLLM cells from vLLM's own config validation (no engine start): which run, which skip and why."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm is not installed")

from perfsuite.facts import models
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure.backends import create


def _cell(**kw):
    d = dict(backend="vllm", model="tiny-llama", dtype="float32", scenario=Scenario("s", 1, 64, 32),
             model_dir=models.resolve("tiny-llama").path)
    d.update(kw)
    return Cell(**d)


def test_plain_cell_available():
    assert create(_cell()).availability() is None


def test_awq_runs_in_16_bit_and_float32_skips_with_vllms_reason(monkeypatch):
    """The float preset gets an AWQ checkpoint built for it (perfsuite.measure.quant.awq); vLLM's AWQ method takes 16-bit
    activations only, and says so. vLLM's config validation is what is tested, so the W4A16 kernel is injected as
    present (an AVX2-only CPU lacks it: that skip is tests/vllm/test_vllm_kernel_probes.py's)."""
    monkeypatch.setenv("PERFSUITE_KERNEL_PROBES", "vllm.cpu_gemm_wna16=present")
    assert create(_cell(quantization="awq", dtype="bfloat16")).availability() is None
    reason = create(_cell(quantization="awq")).availability()
    assert reason is not None and reason.startswith("vllm 0.")
    assert "float32 is not supported for quantization method awq" in reason, reason


def test_tp2_runs_on_a_small_cpu():
    """Before: "Not enough allowed NUMA nodes" (vLLM binds one NUMA node per rank). Now each rank gets its own share
    of the allowed cores, so TP=2 validates wherever there are 2 cores."""
    import os

    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs the CPU build and 2 cores")
    assert create(_cell(tensor_parallel_size=2)).availability() is None
    too_many = len(os.sched_getaffinity(0)) + 1
    reason = create(_cell(tensor_parallel_size=too_many)).availability()
    assert reason is not None and "needs one core per rank" in reason, reason


def test_unknown_option_is_a_usage_error_not_a_skip():
    from perfsuite.measure.backends.vllm_engine_args import VllmOptionError

    with pytest.raises(VllmOptionError, match=r"unknown option.*enforce_eagr"):
        create(_cell(options=(("enforce_eagr", True),))).availability()


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
