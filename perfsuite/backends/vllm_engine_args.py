"""Pure translation of a :class:`~perfsuite.cells.Cell` into vLLM engine arguments and environment.

Nothing here imports vLLM, so it is unit-testable everywhere. The vLLM backend passes the result to
``vllm.EngineArgs(**kwargs)`` with the environment of :func:`engine_env` set while the engine starts.

Choices fixed for every cell (they keep one engine step == one generated token per running request, and keep
repeated measurements of the same prompt honest):

* ``skip_tokenizer_init=True``: prompts are token ids; nothing is detokenized.
* ``enable_prefix_caching=False``: every repetition prefills the same prompt; a prefix-cache hit would turn TTFT
  into a cache lookup.
* ``max_num_seqs = batch`` and ``max_num_batched_tokens >= batch * prompt``: the whole batch is prefilled in one
  engine step (no chunked-prefill split of a prompt).
* ``async_scheduling=False`` (cell option ``async_scheduling`` can turn it on where it is the default, on GPU):
  with async scheduling the host sees step k's tokens while step k+1 runs, so a host-side step loop would no
  longer time one step. No speculative decoding (it emits several tokens per step).
* ``disable_log_stats=False``: vLLM keeps per-request timestamps, which :class:`VllmBackend` cross-checks.
"""

from __future__ import annotations

from typing import Any

from perfsuite.cells import Cell

DEFAULT_KV_CACHE_SPACE_GIB = 1
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
ENGINE_CORE_MODES = ("inproc", "process")


def max_model_len(cell: Cell) -> int:
    need = cell.scenario.prompt_tokens + cell.scenario.new_tokens
    opt = cell.option("max_model_len", None)
    if opt is None:
        return need
    if int(opt) < need:
        raise ValueError(f"backend option max_model_len={opt} is shorter than prompt + new tokens = {need} "
                         f"for scenario {cell.scenario.slug}")
    return int(opt)


def engine_core_mode(cell: Cell) -> str:
    """``inproc``: the engine core (scheduler) runs in this process, so one ``LLMEngine.step()`` is exactly one
    scheduled and executed engine iteration; the model still runs in a worker process (``mp`` executor).
    ``process``: vLLM's default, engine core in its own process with a busy loop that runs ahead of the host."""
    mode = str(cell.option("engine_core", "inproc"))
    if mode not in ENGINE_CORE_MODES:
        raise ValueError(f"backend option engine_core={mode!r}: use one of {', '.join(ENGINE_CORE_MODES)}")
    return mode


def kv_cache_space_gib(cell: Cell) -> int:
    v = cell.option("kv_cache_space_gib", DEFAULT_KV_CACHE_SPACE_GIB)
    if float(v) != int(float(v)) or int(float(v)) < 1:
        # vLLM parses VLLM_CPU_KVCACHE_SPACE with int(): whole GiB only.
        raise ValueError(f"backend option kv_cache_space_gib={v!r}: VLLM_CPU_KVCACHE_SPACE takes a whole number "
                         "of GiB >= 1")
    return int(float(v))


def build_engine_args(cell: Cell, model_path: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.EngineArgs`` of one cell (pure: no vLLM import, no I/O)."""
    sc = cell.scenario
    mml = max_model_len(cell)
    on_cpu = cell.device == "cpu"
    if cell.quantization not in ("none", "awq"):
        raise ValueError(f"quantization {cell.quantization!r} has no vLLM equivalent in perfsuite "
                         "(vllm cells take none or awq)")
    path = model_path or (str(cell.model_dir) if cell.model_dir is not None else cell.model)
    kwargs: dict[str, Any] = {
        "model": path,
        "skip_tokenizer_init": True,
        "trust_remote_code": False,
        "dtype": cell.dtype,
        "seed": cell.seed,
        "max_model_len": mml,
        "max_num_seqs": sc.batch_size,
        "max_num_batched_tokens": max(sc.batch_size * sc.prompt_tokens, mml),
        "enable_prefix_caching": False,
        "enforce_eager": bool(cell.option("enforce_eager", on_cpu)),
        "tensor_parallel_size": cell.tensor_parallel_size,
        "quantization": "awq" if cell.quantization == "awq" else None,
        "load_format": str(cell.option("load_format", "auto")),
        "disable_log_stats": False,
        "async_scheduling": bool(cell.option("async_scheduling", False)),
        # Always a worker process for the model: a crash or a leak stays there; close() ends it.
        "distributed_executor_backend": str(cell.option("executor", "mp")),
    }
    if not on_cpu:
        kwargs["gpu_memory_utilization"] = float(cell.option("gpu_memory_utilization",
                                                             DEFAULT_GPU_MEMORY_UTILIZATION))
    return kwargs


def engine_env(cell: Cell) -> dict[str, str]:
    """Environment the engine must start under (set before ``EngineArgs.create_engine_config``)."""
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0" if engine_core_mode(cell) == "inproc" else "1"}
    if cell.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_space_gib(cell))
        bind = cell.option("omp_threads_bind", None)
        if bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(bind)
    return env
