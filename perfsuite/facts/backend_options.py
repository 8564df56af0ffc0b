"""The backends by name, and the options each allows (``[tool.perfsuite.backend_options.<backend>]``): one table per
backend maps a key to an :class:`Option`. :func:`validate` refuses an unknown key or a bad value, naming the key, what
is allowed and the fix; :func:`workload_items` is what a cell's ``options_hash`` covers. Imports nothing heavy: the
facts below are written down with their source.

To add an option: add one ``"key": Option(...)`` line to the backend's table below (``_TORCH_COMPILE``,
``_ORT_COMMON`` / ``_ORT_DEVICE`` / one EP's table, ``_VLLM``), then read it in the backend with
``cell.option("key", default)``. ``tests/unit/test_backend_options.py`` fails if a backend reads a key that no
table lists, or a table lists a key no backend reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfsuite.facts.schema import Field as Option  # the one field type of every perfsuite table (perfsuite.schema)
from perfsuite.facts.schema import first_unknown, toml

# name -> "module:Class" (perfsuite.measure.backends.create imports the class when a cell of it runs). ONNX Runtime
# names carry the execution provider, as in the cell id.
BACKENDS: dict[str, str] = {
    "torch": "perfsuite.measure.backends.torch_backend:TorchBackend",
    "torch-compile": "perfsuite.measure.backends.torch_backend:TorchBackend",
    **{f"onnxruntime-{ep}": "perfsuite.measure.backends.onnxruntime:OrtBackend"
       for ep in ("cpu", "cuda", "rocm", "migraphx", "dml")},
    "vllm": "perfsuite.measure.backends.vllm_backend:VllmBackend",
    # vLLM with its defaults through its public API (LLM.generate): end-to-end latency only
    "vllm-llm": "perfsuite.measure.backends.vllm_llm:VllmLlmBackend",
}


def known_backends() -> tuple[str, ...]:
    return tuple(BACKENDS)


class OptionError(ValueError):
    """A backend option that is unknown or has a bad value; the message names the key, what is allowed, the fix."""


# --- torch / torch-compile (perfsuite/measure/backends/torch_backend.py) ---------------------------------------
# Modes of torch 2.13.0's torch._inductor.list_mode_options(); torch.compile(mode=...) rejects any other.
COMPILE_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
_TORCH_COMPILE = {"compile_mode": Option("str", "torch.compile(mode=...)", choices=COMPILE_MODES)}

# --- onnxruntime-* (perfsuite/measure/backends/onnxruntime/providers.py build_session_config, backend.py load)
OPT_LEVELS = ("disable", "basic", "extended", "all")  # = providers.OPT_LEVELS (a test keeps them equal)
# ORT's provider-option parser maps these two names (ArenaExtendStrategy; cuda/migraphx execution_provider_info).
ARENA_STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")
_ORT_COMMON = {
    "graph_optimization_level": Option("str", "SessionOptions.graph_optimization_level", choices=OPT_LEVELS,
                                       fold_case=True),
    "io_binding": Option("bool", "bind inputs/outputs (default: on for device EPs, off on the CPU)"),
    "threads": Option("int", "SessionOptions.intra_op_num_threads (0: ORT's default)", minimum=0),
    "inter_op_threads": Option("int", "SessionOptions.inter_op_num_threads (0: ORT's default)", minimum=0),
    # torch.onnx's TorchScript exporter has scaled_dot_product_attention from opset 14 (symbolic_opset14).
    "opset": Option("int", "ONNX opset of the export (default 17)", minimum=14),
    "allow_spinning": Option("bool", "session.intra_op.allow_spinning (ORT spins after each run by default)"),
    "provider_options": Option("table", "raw provider options, passed verbatim (escape hatch)"),
    "verify": Option("bool", "parity check of the export against torch at load", workload=False),
    "log_placements": Option("bool", "read node placements from ORT's verbose log", workload=False),
    # export.py LAYOUTS; providers.decoder_layout picks the default per provider.
    "decoder": Option("str", "decoder export: dynamic (past grows each step) or static (fixed-capacity KV cache, one "
                             "shape per session; default for MIGraphX and with enable_graph)",
                      choices=("dynamic", "static")),
}
_ORT_DEVICE = {
    "strict": Option("bool", "disable the CPU EP fallback (default: on for device EPs)"),
    "device_id": Option("int", "device ordinal", minimum=0),
    "mem_limit": Option("int", "device arena limit in bytes (gpu_mem_limit / migraphx_mem_limit)", minimum=0),
    "arena_extend_strategy": Option("str", "device arena growth", choices=ARENA_STRATEGIES),
}
_ORT_DEVICE_ID = {k: _ORT_DEVICE[k] for k in ("strict", "device_id")}  # MIGraphX and DirectML: no arena options
_ORT_BACKENDS: dict[str, dict[str, Option]] = {
    "onnxruntime-cpu": {
        **_ORT_COMMON,
        # ORT rejects disabling the CPU fallback when the CPU EP is the requested provider (providers.py).
        "strict": Option("bool", "must stay false on the CPU EP", choices=(False,)),
        "iobinding_device": Option("str", "device of bound outputs", choices=("cpu",)),
    },
    "onnxruntime-migraphx": {
        **_ORT_COMMON,
        # No ORT version's Python API takes a MIGraphX mem_limit / arena_extend_strategy (providers.py,
        # MIGRAPHX_PYTHON_KEYS, read from onnxruntime_pybind_state.cc at each tag).
        **_ORT_DEVICE_ID,
        "iobinding_device": Option("str", "device of bound outputs", choices=("cuda", "cpu")),
        "fp16": Option("bool", "migraphx_fp16_enable: follows the dtypes axis (true only for float16 cells)"),
        "int8": Option("bool", "retired: migraphx_int8_enable follows quantizations = [\"int8-static\"]",
                       choices=(False,)),
        "int8_calibration_table": Option("str", "int8-static: migraphx_int8_calibration_table_name (default: "
                                                "perfsuite builds one with ORT's MinMax calibrator)"),
        "int8_native_calibration_table": Option("bool", "int8-static: the table is in MIGraphX's native format"),
        "exhaustive_tune": Option("bool", "migraphx_exhaustive_tune"),
        # No ORT version exposes offload_copy as a MIGraphX provider option (providers.py explains).
        "offload_copy": Option("bool", "only false is possible", choices=(False,)),
        "model_cache_dir": Option("str", "migraphx_model_cache_dir (compiled programs)", workload=False),
    },
    "onnxruntime-rocm": {
        **_ORT_COMMON, **_ORT_DEVICE,
        "iobinding_device": Option("str", "device of bound outputs", choices=("cuda", "cpu")),
        "tunable_op": Option("bool", "tunable_op_enable"),
        "tunable_op_tuning": Option("bool", "tunable_op_tuning_enable"),
        "enable_graph": Option("bool", "enable_hip_graph"),
    },
    "onnxruntime-cuda": {
        **_ORT_COMMON, **_ORT_DEVICE,
        "iobinding_device": Option("str", "device of bound outputs", choices=("cuda", "cpu")),
        "cudnn_conv_algo_search": Option("str", "cuDNN convolution algorithm search",
                                         choices=("EXHAUSTIVE", "HEURISTIC", "DEFAULT")),
        "use_tf32": Option("bool", "use_tf32"),
        "enable_graph": Option("bool", "enable_cuda_graph"),
    },
    "onnxruntime-dml": {
        **_ORT_COMMON, **_ORT_DEVICE_ID,
        "iobinding_device": Option("str", "device of bound outputs", choices=("dml", "cpu")),
    },
}

# --- vllm (perfsuite/measure/backends/vllm_engine_args.py, vllm_backend.py) -----------------------------------
_VLLM = {
    "max_model_len": Option("int", "EngineArgs.max_model_len (default: prompt + new tokens)", minimum=1),
    "engine_core": Option("str", "engine core in this process or its own", choices=("inproc", "process")),
    # vLLM parses VLLM_CPU_KVCACHE_SPACE with int(): whole GiB.
    "kv_cache_space_gib": Option("int", "VLLM_CPU_KVCACHE_SPACE in GiB (CPU)", minimum=1),
    "enforce_eager": Option("bool", "EngineArgs.enforce_eager (default: on for the CPU)"),
    # Checkpoints load from safetensors only (perfsuite never loads pickled .bin weights).
    "load_format": Option("str", "EngineArgs.load_format", choices=("auto", "safetensors")),
    "async_scheduling": Option("bool", "EngineArgs.async_scheduling"),
    # vllm 0.32 config/parallel.py: DistributedExecutorBackend = Literal["ray", "mp", "uni", "external_launcher"].
    "executor": Option("str", "EngineArgs.distributed_executor_backend", choices=("mp", "uni", "ray",
                                                                                  "external_launcher")),
    "gpu_memory_utilization": Option("float", "EngineArgs.gpu_memory_utilization (GPU)", minimum=0.01, maximum=1.0),
    "omp_threads_bind": Option("str", "VLLM_CPU_OMP_THREADS_BIND (CPU): 'auto', 'nobind' or a CPU list "
                                      "(default at TP>1: one share of the allowed CPUs per rank)"),
    # perfsuite/measure/quant/awq.py GROUP_SIZES; vLLM's CPU W4A16 kernel needs even group sizes.
    "awq_group_size": Option("int", "group size of the AWQ checkpoint built from float weights (default: the "
                                    "largest of 128/64/32 dividing every input dimension)", choices=(32, 64, 128)),
}

# vllm-llm (perfsuite/measure/backends/vllm_llm.py): vLLM with its defaults through LLM.generate(); a subset of the
# engine options plus the sampling temperature.
_VLLM_LLM = {
    **{k: _VLLM[k] for k in ("enforce_eager", "gpu_memory_utilization", "load_format", "max_model_len",
                             "kv_cache_space_gib", "omp_threads_bind", "awq_group_size")},
    "temperature": Option("float", "sampling temperature of the timed requests (default 0: greedy, as the step "
                                   "cells; vllm bench latency samples at 1.0)", minimum=0.0, maximum=10.0),
}

SCHEMAS: dict[str, dict[str, Option]] = {
    "torch": {},
    "torch-compile": _TORCH_COMPILE,
    **_ORT_BACKENDS,
    "vllm": _VLLM,
    "vllm-llm": _VLLM_LLM,
}


def validate(backend: str, options: Mapping[str, Any], where: str | None = None) -> dict[str, Any]:
    """The options as a plain dict if every key is known and every value allowed; else :class:`OptionError`."""
    if backend not in SCHEMAS:
        raise OptionError(f"backend {backend!r} has no option schema; known: {', '.join(SCHEMAS)}")
    table = SCHEMAS[backend]
    where = where or f"[tool.perfsuite.backend_options.{backend}]"
    key = first_unknown(options, table)
    if key is not None:
        allowed = ", ".join(sorted(table)) or "none (this backend takes no options)"
        raise OptionError(f"{where} {key}: unknown option for {backend}; allowed: {allowed}. Fix the spelling "
                          "or remove the key")
    for key in sorted(options):
        value = options[key]
        problem = table[key].problem(value)
        if problem:
            shown = toml(value) if isinstance(value, (bool, str)) else repr(value)
            raise OptionError(f"{where} {key} = {shown}: must be {problem[1]} ({table[key].doc})")
    return dict(options)


def workload_items(backend: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that change what is timed (all but diagnostics/load-time ones); unknown keys are kept."""
    table = SCHEMAS.get(backend, {})
    return {k: v for k, v in options.items() if k not in table or table[k].workload}
