"""Pure engine-argument building for the vLLM backend, and its availability without vLLM (no vLLM needed)."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path

import pytest

from perfsuite.backends.vllm_engine_args import build_engine_args, engine_env
from perfsuite.cells import Cell, Scenario


def cell(**kw):
    base = dict(backend="vllm", model="tiny-llama", dtype="float32", scenario=Scenario("s", 2, 64, 32),
                model_dir=Path("/m/tiny"))
    base.update(kw)
    return Cell(**base)


def test_defaults_cpu():
    a = build_engine_args(cell())
    assert a["model"] == "/m/tiny" and a["skip_tokenizer_init"] is True
    assert a["dtype"] == "float32" and a["seed"] == 0
    assert a["max_model_len"] == 96  # prompt + new tokens
    assert a["max_num_seqs"] == 2 and a["max_num_batched_tokens"] >= 2 * 64
    assert a["enable_prefix_caching"] is False and a["async_scheduling"] is False
    assert a["enforce_eager"] is True  # default on CPU
    assert a["tensor_parallel_size"] == 1 and a["quantization"] is None
    assert a["load_format"] == "auto" and a["disable_log_stats"] is False
    assert a["distributed_executor_backend"] == "mp"
    assert "gpu_memory_utilization" not in a
    assert engine_env(cell()) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_gpu_awq_tp_dtype():
    c = cell(device="cuda", dtype="bfloat16", quantization="awq", tensor_parallel_size=2)
    a = build_engine_args(c)
    assert a["quantization"] == "awq" and a["tensor_parallel_size"] == 2 and a["dtype"] == "bfloat16"
    assert a["enforce_eager"] is False and a["gpu_memory_utilization"] == 0.9
    assert "VLLM_CPU_KVCACHE_SPACE" not in engine_env(c)


def test_options():
    c = cell(options=(("async_scheduling", True), ("engine_core", "process"), ("enforce_eager", False),
                      ("kv_cache_space_gib", 3), ("load_format", "dummy"), ("max_model_len", 512),
                      ("omp_threads_bind", "nobind")))
    a = build_engine_args(c)
    assert a["max_model_len"] == 512 and a["max_num_batched_tokens"] >= 512
    assert a["load_format"] == "dummy" and a["enforce_eager"] is False and a["async_scheduling"] is True
    assert engine_env(c) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CPU_KVCACHE_SPACE": "3",
                             "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    g = cell(device="cuda", options=(("gpu_memory_utilization", 0.5),))
    assert build_engine_args(g)["gpu_memory_utilization"] == 0.5


def test_model_path_falls_back_to_name():
    assert build_engine_args(cell(model_dir=None, model="/x/ckpt"))["model"] == "/x/ckpt"
    assert build_engine_args(cell(), model_path="/other")["model"] == "/other"


@pytest.mark.parametrize("opts, match", [
    ((("max_model_len", 64),), "shorter than prompt"),
    ((("kv_cache_space_gib", 0.5),), "whole number"),
    ((("engine_core", "thread"),), "engine_core"),
])
def test_bad_options(opts, match):
    with pytest.raises(ValueError, match=match):
        build_engine_args(cell(options=opts))
        engine_env(cell(options=opts))


def test_int8_dynamic_rejected():
    with pytest.raises(ValueError, match="int8-dynamic"):
        build_engine_args(cell(quantization="int8-dynamic"))


def test_availability_without_vllm(monkeypatch):
    from perfsuite.backends.vllm_backend import VllmBackend

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("No module named 'vllm'")
        return real_import(name, *args, **kwargs)

    for mod in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    reason = VllmBackend(cell()).availability()
    assert reason == ("vllm is not importable: No module named 'vllm'; install the cpu extra "
                      "(pip install -e .[cpu]) or use the ROCm vLLM container")


def test_registered_and_cheap_constructor():
    from perfsuite.backends import BACKENDS, create

    assert BACKENDS["vllm"] == "perfsuite.backends.vllm_backend:VllmBackend"
    b = create(cell())
    assert b.name == "vllm" and b.engine is None
