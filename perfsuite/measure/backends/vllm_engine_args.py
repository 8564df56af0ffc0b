"""Pure translation of a :class:`~perfsuite.facts.cells.Cell` into vLLM engine arguments and environment.

Nothing here imports vLLM, so it is unit-testable everywhere. The vLLM backend passes the result to
``vllm.EngineArgs(**kwargs)`` with the environment of :func:`engine_env` set while the engine starts.

Choices fixed for every step-mode cell (they keep one engine step == one generated token per running request, and
keep repeated measurements of the same prompt honest):

* ``skip_tokenizer_init=True``: prompts are token ids; nothing is detokenized.
* ``enable_prefix_caching=False``: every repetition prefills the same prompt; a prefix-cache hit would turn TTFT
  into a cache lookup.
* ``max_num_seqs = batch`` and ``max_num_batched_tokens >= batch * prompt``: the whole batch is prefilled in one
  engine step (no chunked-prefill split of a prompt).
* ``async_scheduling=False`` (cell option ``async_scheduling`` can turn it on where it is the default, on GPU):
  with async scheduling the host sees step k's tokens while step k+1 runs, so a host-side step loop would no
  longer time one step. No speculative decoding (it emits several tokens per step).
* ``disable_log_stats=False``: vLLM keeps per-request timestamps, which :class:`VllmBackend` cross-checks.

The ``llm`` mode (:mod:`perfsuite.measure.backends.vllm_llm`) is the opposite: vLLM's own defaults through ``vllm.LLM``,
see :func:`llm_engine_args`.

Tensor parallelism on the CPU (one contiguous group of CPUs per rank, :func:`cpu_bind_plan`): docs/recipes.md, "vLLM
tensor parallelism".
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from perfsuite.facts import backend_options
from perfsuite.facts.cells import Cell

DEFAULT_KV_CACHE_SPACE_GIB = 1
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
ENGINE_CORE_MODES = ("inproc", "process")
LLM_BACKEND = "vllm-llm"  # the backend name of the llm mode (perfsuite.measure.backends.vllm_llm)

# Every key [tool.perfsuite.backend_options.vllm] / [...vllm-llm] may hold, with what it does: read from the one
# schema of all backends (perfsuite/facts/backend_options.py). Unknown keys are refused (check_options) also for cells
# that did not come through the config (perfsuite ab --cells, the confirmation's A side).
VLLM_OPTIONS: dict[str, str] = {k: f.doc for k, f in backend_options.SCHEMAS["vllm"].items()}
VLLM_LLM_OPTIONS: dict[str, str] = {k: f.doc for k, f in backend_options.SCHEMAS[LLM_BACKEND].items()}


class VllmOptionError(ValueError):
    """An unknown or invalid key in ``[tool.perfsuite.backend_options.vllm]``; the message names the fix."""


class VllmPlacementError(ValueError):
    """The machine cannot host the cell's ranks (fewer allowed CPUs than TP ranks): a skip reason, not a usage
    error."""


def check_options(cell: Cell) -> None:
    """Refuse option keys this backend does not know (a typo would otherwise silently measure the default)."""
    known = VLLM_LLM_OPTIONS if cell.backend == LLM_BACKEND else VLLM_OPTIONS
    unknown = sorted(set(dict(cell.options)) - set(known))
    if unknown:
        raise VllmOptionError(
            f"[tool.perfsuite.backend_options.{cell.backend}]: unknown option(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known))}")


def max_model_len(cell: Cell) -> int:
    need = cell.scenario.prompt_tokens + cell.scenario.new_tokens
    opt = cell.option("max_model_len", None)
    if opt is None:
        return need
    if int(opt) < need:
        raise VllmOptionError(f"backend option max_model_len={opt} is shorter than prompt + new tokens = {need} "
                              f"for scenario {cell.scenario.slug}")
    return int(opt)


def engine_core_mode(cell: Cell) -> str:
    """``inproc``: the engine core (scheduler) runs in this process, so one ``LLMEngine.step()`` is exactly one
    scheduled and executed engine iteration; the model still runs in a worker process (``mp`` executor).
    ``process``: vLLM's default, engine core in its own process with a busy loop that runs ahead of the host."""
    m = str(cell.option("engine_core", "inproc"))
    if m not in ENGINE_CORE_MODES:
        raise VllmOptionError(f"backend option engine_core={m!r}: use one of {', '.join(ENGINE_CORE_MODES)}")
    return m


def kv_cache_space_gib(cell: Cell) -> int:
    v = cell.option("kv_cache_space_gib", DEFAULT_KV_CACHE_SPACE_GIB)
    if float(v) != int(float(v)) or int(float(v)) < 1:
        # vLLM parses VLLM_CPU_KVCACHE_SPACE with int(): whole GiB only.
        raise VllmOptionError(f"backend option kv_cache_space_gib={v!r}: VLLM_CPU_KVCACHE_SPACE takes a whole "
                              "number of GiB >= 1")
    return int(float(v))


def cpu_bind_plan(cpus: list[int], ranks: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` giving each of ``ranks`` ranks its own contiguous share of ``cpus``.

    ``[0, 1]`` and 2 ranks -> ``"0|1"``; ``[0..7]`` and 2 -> ``"0-3|4-7"``; the remainder goes to the first ranks.
    Raises when there are fewer CPUs than ranks (two ranks on one core would time each other, not the model).
    """
    cpus = sorted(cpus)
    if ranks < 1:
        raise VllmOptionError(f"tensor_parallel_size={ranks}: must be >= 1")
    if len(cpus) < ranks:
        raise VllmPlacementError(f"tensor_parallel_size={ranks} on the CPU needs one core per rank; this process may "
                              f"use {len(cpus)} ({_ranges(cpus) or 'none'}): lower the TP size or widen the "
                              "affinity (taskset)")
    per, extra = divmod(len(cpus), ranks)
    bounds = [r * per + min(r, extra) for r in range(ranks + 1)]  # the first `extra` ranks get one CPU more
    return "|".join(_ranges(cpus[a:b]) for a, b in itertools.pairwise(bounds))


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the list syntax vLLM's parse_id_list reads)."""
    out = []
    for _, group in itertools.groupby(enumerate(ids), lambda ic: ic[1] - ic[0]):  # a run of consecutive ids
        run = [c for _, c in group]
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ",".join(out)


def _cell_args(cell: Cell, model_path: str | None) -> dict[str, Any]:
    """What every vLLM cell decides, in both modes: the model, its dtype and seed, TP, quantization, token-id prompts
    (presets carry no tokenizer), no remote code and no prefix cache (every timed generation repeats its prompts)."""
    check_options(cell)
    if cell.quantization not in ("none", "awq"):
        raise VllmOptionError(f"quantization {cell.quantization!r} has no vLLM equivalent in perfsuite "
                              "(vllm cells take none or awq)")
    return {
        "model": model_path or (str(cell.model_dir) if cell.model_dir is not None else cell.model),
        "skip_tokenizer_init": True,
        "trust_remote_code": False,
        "dtype": cell.dtype,
        "seed": cell.seed,
        "tensor_parallel_size": cell.tensor_parallel_size,
        "quantization": "awq" if cell.quantization == "awq" else None,
        "enable_prefix_caching": False,
    }


def build_engine_args(cell: Cell, model_path: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.EngineArgs`` of one step-mode cell (pure: no vLLM import, no I/O)."""
    kwargs = _cell_args(cell, model_path)
    sc = cell.scenario
    mml = max_model_len(cell)
    on_cpu = cell.device == "cpu"
    kwargs.update({
        "max_model_len": mml,
        "max_num_seqs": sc.batch_size,
        "max_num_batched_tokens": max(sc.batch_size * sc.prompt_tokens, mml),
        "enforce_eager": bool(cell.option("enforce_eager", on_cpu)),
        "load_format": str(cell.option("load_format", "auto")),
        "disable_log_stats": False,
        "async_scheduling": bool(cell.option("async_scheduling", False)),
        # Always a worker process for the model: a crash, a leak, its OpenMP binding and its torch.set_num_threads
        # patch stay there; close() ends it.
        "distributed_executor_backend": str(cell.option("executor", "mp")),
    })
    if not on_cpu:
        kwargs["gpu_memory_utilization"] = float(cell.option("gpu_memory_utilization",
                                                             DEFAULT_GPU_MEMORY_UTILIZATION))
    return kwargs


def llm_engine_args(cell: Cell, model_path: str | None = None) -> dict[str, Any]:
    """``vllm.LLM(**kwargs)`` for the ``llm`` mode: vLLM's defaults, as ``vllm bench latency`` starts the engine (it
    turns the prefix cache off too), with only :func:`_cell_args` and the explicit ``enforce_eager`` /
    ``gpu_memory_utilization`` / ``load_format`` / ``max_model_len`` options set. Async scheduling, the engine-core
    process, CUDA graphs / torch.compile, chunked prefill and the batch limits stay vLLM's."""
    kwargs = _cell_args(cell, model_path)
    opts = dict(cell.options)
    kwargs.update({k: opts[k] for k in ("enforce_eager", "gpu_memory_utilization", "load_format") if k in opts})
    if "max_model_len" in opts:
        kwargs["max_model_len"] = max_model_len(cell)
    return kwargs


def engine_env(cell: Cell, allowed_cpus: list[int] | None = None) -> dict[str, str]:
    """Environment the engine must start under (set before ``EngineArgs.create_engine_config``).

    ``allowed_cpus``: the CPUs this process may run on (``os.sched_getaffinity(0)``), for the per-rank binding of
    a TP>1 CPU cell; ``None`` reads it here.
    """
    check_options(cell)
    env: dict[str, str] = {}
    if cell.backend != LLM_BACKEND:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if engine_core_mode(cell) == "inproc" else "1"
    if cell.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_space_gib(cell))
        bind = cell.option("omp_threads_bind", None)
        if bind is None and cell.tensor_parallel_size > 1:
            if allowed_cpus is None:
                allowed_cpus = sorted(os.sched_getaffinity(0))
            bind = cpu_bind_plan(allowed_cpus, cell.tensor_parallel_size)
        if bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(bind)
    return env


# A unix socket's path holds at most 107 bytes (sun_path is 108 with its NUL); vLLM names its engine links
# ``<VLLM_RPC_BASE_PATH>/<uuid4>``, 37 more characters.
_SOCKET_PATH_MAX = 107
_VLLM_SOCKET_NAME = 37


def rpc_socket_dir(environ: dict[str, str] | None = None) -> str:
    """A new folder for vLLM's IPC sockets (``VLLM_RPC_BASE_PATH``), which vLLM never removes: its owner removes it
    when the engine or server ends. Made in the user's ``VLLM_RPC_BASE_PATH`` or the temp folder, unless the socket
    paths there would be too long for a unix socket (a deep ``TMPDIR``): then in ``/tmp``."""
    import tempfile

    env = os.environ if environ is None else environ
    base = env.get("VLLM_RPC_BASE_PATH") or tempfile.gettempdir()
    # the folder's own name: "perfsuite-rpc-" and mkdtemp's 8 characters
    if len(os.fsencode(base)) + 1 + len("perfsuite-rpc-") + 8 + _VLLM_SOCKET_NAME > _SOCKET_PATH_MAX:
        base = "/tmp"
    return tempfile.mkdtemp(prefix="perfsuite-rpc-", dir=base)
