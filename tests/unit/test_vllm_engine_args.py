"""Pure engine-argument building for the vLLM backend, and its availability without vLLM (no vLLM needed)."""

from __future__ import annotations

import builtins
import os
import sys
from pathlib import Path

import pytest

from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure.backends.vllm_engine_args import (
    VLLM_LLM_OPTIONS,
    VLLM_OPTIONS,
    VllmOptionError,
    VllmPlacementError,
    build_engine_args,
    check_options,
    cpu_bind_plan,
    engine_env,
    llm_engine_args,
    rpc_socket_dir,
)


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


@pytest.mark.parametrize("cpus, ranks, plan", [
    ([0, 1], 2, "0|1"),  # this VM: one core per rank
    (list(range(8)), 2, "0-3|4-7"),
    ([0, 1, 2], 2, "0-1|2"),  # the remainder goes to the first rank
    ([0, 2, 4, 5], 2, "0,2|4-5"),  # a taskset with holes
    ([3, 1, 0, 2], 1, "0-3"),
])
def test_cpu_bind_plan(cpus, ranks, plan):
    assert cpu_bind_plan(cpus, ranks) == plan


def test_cpu_bind_plan_needs_a_core_per_rank():
    with pytest.raises(VllmPlacementError, match="needs one core per rank; this process may use 1"):
        cpu_bind_plan([0], 2)


def test_tp2_cpu_env_binds_one_share_per_rank():
    c = cell(tensor_parallel_size=2)
    assert engine_env(c, allowed_cpus=[0, 1])["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_env(cell(), allowed_cpus=[0, 1])  # TP=1: vLLM's own default
    forced = cell(tensor_parallel_size=2, options=(("omp_threads_bind", "0|0"),))
    assert engine_env(forced, allowed_cpus=[0, 1])["VLLM_CPU_OMP_THREADS_BIND"] == "0|0"  # the option wins
    gpu = cell(device="cuda", tensor_parallel_size=2)
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_env(gpu, allowed_cpus=[0])  # GPU: one GPU per rank, vLLM's


def test_unknown_option_is_refused():
    """Issue 9: a mistyped key (enforce_eagr) used to be ignored silently and the default measured."""
    with pytest.raises(VllmOptionError, match=r"backend_options.vllm\]: unknown option\(s\) enforce_eagr; known: "):
        build_engine_args(cell(options=(("enforce_eagr", False),)))
    with pytest.raises(VllmOptionError, match="unknown option"):
        engine_env(cell(options=(("kv_cache_gib", 2),)))
    check_options(cell(options=tuple((k, 1) for k in ("enforce_eager", "kv_cache_space_gib"))))


def test_llm_mode_options_and_defaults():
    c = cell(backend="vllm-llm")
    a = llm_engine_args(c)
    # vLLM's defaults: nothing about scheduling, eager mode, batch limits or the engine-core process is set
    assert set(a) == {"model", "skip_tokenizer_init", "trust_remote_code", "dtype", "seed", "tensor_parallel_size",
                      "quantization", "enable_prefix_caching"}
    assert a["enable_prefix_caching"] is False  # as `vllm bench latency` sets it
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in engine_env(c)
    assert llm_engine_args(cell(backend="vllm-llm", options=(("enforce_eager", True),)))["enforce_eager"] is True
    with pytest.raises(VllmOptionError, match="engine_core"):  # a step-mode option means nothing there
        llm_engine_args(cell(backend="vllm-llm", options=(("engine_core", "process"),)))
    assert "temperature" in VLLM_LLM_OPTIONS and "temperature" not in VLLM_OPTIONS


def test_int8_dynamic_rejected():
    with pytest.raises(ValueError, match="int8-dynamic"):
        build_engine_args(cell(quantization="int8-dynamic"))


def test_availability_without_vllm(monkeypatch):
    from perfsuite.measure.backends.vllm_backend import VllmBackend

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
    from perfsuite.measure.backends import BACKENDS, create

    assert BACKENDS["vllm"] == "perfsuite.measure.backends.vllm_backend:VllmBackend"
    b = create(cell())
    assert b.name == "vllm" and b.engine is None


def test_rpc_socket_dir_keeps_vllm_socket_paths_short_enough(tmp_path, monkeypatch):
    """vLLM binds ``<VLLM_RPC_BASE_PATH>/<uuid4>``; a unix socket path holds 107 bytes. A short base is used as it is
    (the user's VLLM_RPC_BASE_PATH first); a deep one (pytest's tmp_path under a long TMPDIR) falls back to /tmp."""
    import shutil
    import tempfile
    import uuid

    short = tempfile.mkdtemp(prefix="s", dir="/tmp")
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    made = []
    try:
        made.append(rpc_socket_dir({"VLLM_RPC_BASE_PATH": short}))
        assert Path(made[-1]).parent == Path(short)
        made.append(rpc_socket_dir({"VLLM_RPC_BASE_PATH": str(deep)}))
        assert Path(made[-1]).parent == Path("/tmp")
        monkeypatch.setattr(tempfile, "tempdir", str(deep))
        made.append(rpc_socket_dir({}))
        assert Path(made[-1]).parent == Path("/tmp")
        for d in made:
            assert Path(d).name.startswith("perfsuite-rpc-")
            assert len(os.fsencode(os.path.join(d, str(uuid.uuid4())))) <= 107
    finally:
        for d in [*made, short]:
            shutil.rmtree(d, ignore_errors=True)
