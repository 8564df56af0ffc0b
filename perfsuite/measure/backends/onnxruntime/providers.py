"""Execution providers: which EP a backend name means, its options, and how to tell whether it really ran.

Everything here is a pure function of a cell / an ORT version / captured ORT output (``session_options`` only
copies a config onto ORT's object), so it is unit-tested without the provider's hardware. Option names are the
ones ORT's Python ``provider_options`` parsers accept, not the C struct field names. An unknown name makes ORT
refuse the session (it never silently ignores one), so a wrong name here fails a cell loudly rather than
measuring something else, except on MIGraphX, whose Python binding falls back to the CPU instead: every MIGraphX
key perfsuite emits is checked against :data:`MIGRAPHX_PYTHON_KEYS` (docs/recipes.md, "MIGraphX fp16 / int8 and
the option names"). ROCm: onnxruntime-rocm <= 1.22 (later ORT removed the EP).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from perfsuite.facts import backend_options

CPU_EP = "CPUExecutionProvider"

# backend name -> (execution provider, device type for IO binding, pip package that brings the EP)
EP_OF_BACKEND: dict[str, tuple[str, str, str]] = {
    "onnxruntime-cpu": (CPU_EP, "cpu", "onnxruntime"),
    "onnxruntime-cuda": ("CUDAExecutionProvider", "cuda", "onnxruntime-gpu on an NVIDIA runner"),
    "onnxruntime-rocm": ("ROCMExecutionProvider", "cuda",
                         "onnxruntime-rocm (<= 1.22; later ORT removed the ROCm EP) on the ROCm runner"),
    "onnxruntime-migraphx": ("MIGraphXExecutionProvider", "cuda", "onnxruntime-migraphx on the ROCm runner"),
    "onnxruntime-dml": ("DmlExecutionProvider", "dml", "onnxruntime-directml on a Windows runner"),
}

# graph_optimization_level option -> ort.GraphOptimizationLevel member
ORT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
              "all": "ORT_ENABLE_ALL"}
OPT_LEVELS = tuple(ORT_LEVELS)
DECODER_LAYOUTS = ("dynamic", "static")
# onnxruntime cell quantizations: ORT's dynamic int8 graph on every EP, MIGraphX's calibrated int8 on MIGraphX only.
QUANTIZATIONS = ("none", "int8-dynamic", "int8-static")

DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"

# Cell options this backend understands: every key of the onnxruntime-* schemas.
KNOWN_OPTIONS = frozenset().union(*(t for b, t in backend_options.SCHEMAS.items() if b.startswith("onnxruntime-")))


class ProviderConfigError(ValueError):
    """A cell option that cannot be mapped onto the provider; the message names the fix."""


@dataclass(frozen=True)
class SessionConfig:
    """Everything needed to create an ``InferenceSession`` for a cell, as plain data."""

    provider: str  # the requested (primary) execution provider
    providers: list[str]
    provider_options: list[dict[str, str]]
    config_entries: dict[str, str]  # SessionOptions.add_session_config_entry
    graph_optimization_level: str  # one of OPT_LEVELS
    strict: bool
    io_binding: bool
    io_device: str  # OrtValue device type for IO binding ("cpu", "cuda", "dml")
    device_id: int
    session_attrs: dict[str, Any] = field(default_factory=dict)  # SessionOptions attributes to set

    @property
    def is_device(self) -> bool:
        return self.provider != CPU_EP


def _version_tuple(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _flag(value: Any) -> str:
    return "1" if bool(value) and str(value).lower() not in ("0", "false", "no", "off") else "0"


def ep_of(backend: str) -> str:
    try:
        return EP_OF_BACKEND[backend][0]
    except KeyError:
        raise ProviderConfigError(f"{backend!r} is not an onnxruntime backend; use one of "
                                  f"{', '.join(EP_OF_BACKEND)}") from None


# The keys of the MIGraphX branch of CreateExecutionProviderInstance in PYBIND_SOURCE, read at the tags of
# microsoft/onnxruntime (from the ROCm/onnxruntime mirror); the row of the newest version <= the installed one applies.
_KEYS_117 = frozenset({"device_id", "migraphx_fp16_enable", "migraphx_int8_enable",
                       "migraphx_int8_calibration_table_name", "migraphx_use_native_calibration_table"})
_KEYS_119 = _KEYS_117 | {"migraphx_save_compiled_model", "migraphx_save_model_path", "migraphx_load_compiled_model",
                         "migraphx_load_model_path"}
_KEYS_120 = _KEYS_119 | {"migraphx_exhaustive_tune"}
_KEYS_123 = frozenset({"device_id", "migraphx_fp16_enable", "migraphx_fp8_enable", "migraphx_int8_enable",
                       "migraphx_int8_calibration_table_name", "migraphx_int8_use_native_calibration_table",
                       "migraphx_model_cache_dir", "migraphx_exhaustive_tune"})
MIGRAPHX_PYTHON_KEYS: tuple[tuple[tuple[int, int], str, frozenset[str]], ...] = (
    ((1, 17), "v1.17.0 (5f0b62cd) and v1.18.0 (45737400)", _KEYS_117),
    ((1, 19), "v1.19.0 (26250ae7) and v1.19.2 (ffceed9d)", _KEYS_119),
    ((1, 20), "v1.20.0 (c4fb724e) to v1.22.1 (89746dc1)", _KEYS_120),
    # VERSION_NUMBER 1.23.0: AMD's integration branch (ROCm/onnxruntime wml-main, 33bb93bb), proposed upstream for
    # 1.23.0 (microsoft/onnxruntime#25338): the native-table key gains "int8_", save/load give way to a model cache
    # directory. Its names are those of microsoft/onnxruntime's migraphx_execution_provider_info.h (03c12500).
    ((1, 23), "1.23.0: ROCm/onnxruntime wml-main (33bb93bb)", _KEYS_123),
)
PYBIND_SOURCE = "onnxruntime/python/onnxruntime_pybind_state.cc"


def migraphx_python_keys(ort_version: str) -> tuple[str, frozenset[str]]:
    """(where the list was read, the keys) for an ORT version; versions older than 1.17 get the 1.17 list."""
    v = _version_tuple(ort_version)
    rows = [r for r in MIGRAPHX_PYTHON_KEYS if r[0] <= v] or [MIGRAPHX_PYTHON_KEYS[0]]
    return rows[-1][1:]


def migraphx_option_names(ort_version: str) -> dict[str, str]:
    """perfsuite's logical MIGraphX option -> the key this ORT version's Python API parses (only those it has)."""
    _, keys = migraphx_python_keys(ort_version)
    names = {"fp16": "migraphx_fp16_enable", "int8": "migraphx_int8_enable",
             "int8_calibration_table": "migraphx_int8_calibration_table_name",
             "int8_native_calibration_table": ("migraphx_int8_use_native_calibration_table"
                                               if "migraphx_int8_use_native_calibration_table" in keys
                                               else "migraphx_use_native_calibration_table"),
             "exhaustive_tune": "migraphx_exhaustive_tune", "model_cache_dir": "migraphx_model_cache_dir"}
    return {k: v for k, v in names.items() if v in keys}


def decoder_layout(backend: str, options: dict[str, Any]) -> tuple[str, str]:
    """Which decoder export a cell runs (``dynamic`` or ``static``, see decoder_io.py) and why."""
    ep = ep_of(backend)
    chosen = options.get("decoder")
    graph = bool(options.get("enable_graph"))
    if chosen is not None and chosen not in DECODER_LAYOUTS:
        raise ProviderConfigError(f"decoder={chosen!r}: use one of {', '.join(DECODER_LAYOUTS)}")
    if graph and chosen == "dynamic":
        raise ProviderConfigError(
            "enable_graph=true with decoder=dynamic cannot work: a captured CUDA/HIP graph replays one set of input "
            "shapes and addresses, and the dynamic decoder's past grows every step; drop `decoder` (static is the "
            "default with enable_graph) or set decoder=static")
    if chosen is not None:
        return str(chosen), "set by backend option decoder"
    if ep == "MIGraphXExecutionProvider":
        return "static", ("MIGraphX compiles the graph for each new input shape, and the dynamic decoder's past grows "
                          "by one every step (a recompile per token; AMDMIGraphX#4618): the static decoder feeds "
                          "one shape per session")
    if graph:
        return "static", "enable_graph: a captured graph replays fixed shapes and addresses"
    return "dynamic", "the provider runs any shape without recompiling"


def build_session_config(backend: str, dtype: str, options: dict[str, Any], ort_version: str,
                         quantization: str = "none", calibration_table: str | None = None) -> SessionConfig:
    """Map a cell (backend name, dtype, quantization, backend options) to providers, provider options and session
    settings. ``calibration_table``: the int8 calibration table of an ``int8-static`` MIGraphX cell (perfsuite
    builds one when the ``int8_calibration_table`` option does not name a file)."""
    unknown = sorted(set(options) - KNOWN_OPTIONS)
    if unknown:
        raise ProviderConfigError(f"unknown onnxruntime backend option(s) {unknown}; known: "
                                  f"{', '.join(sorted(KNOWN_OPTIONS))}")
    ep = ep_of(backend)
    io_device = EP_OF_BACKEND[backend][1]
    is_device = ep != CPU_EP
    level = str(options.get("graph_optimization_level", "all")).lower()
    if level not in OPT_LEVELS:
        raise ProviderConfigError(f"graph_optimization_level={level!r}: use one of {', '.join(OPT_LEVELS)}")
    device_id = int(options.get("device_id", 0))
    strict = bool(options.get("strict", is_device))
    if strict and not is_device:
        raise ProviderConfigError(
            "strict=true on onnxruntime-cpu cannot work: ORT rejects disabling the CPU EP fallback while the CPU "
            "EP is the requested provider; remove `strict` from [tool.perfsuite.backend_options.onnxruntime-cpu]")
    po: dict[str, str] = {"device_id": str(device_id)} if is_device else {}
    entries: dict[str, str] = {}
    attrs: dict[str, Any] = {}
    if quantization == "int8-static" and ep != "MIGraphXExecutionProvider":
        raise ProviderConfigError(f"quantization int8-static is MIGraphX's calibrated int8 (onnxruntime-migraphx); "
                                  f"{backend} cells take none or int8-dynamic")
    if ep == "MIGraphXExecutionProvider":
        names = migraphx_option_names(ort_version)
        # The dtypes axis decides fp16: a float16 cell is MIGraphX's fp16 mode over the float16 export.
        if "fp16" in options and _flag(options["fp16"]) != _flag(dtype == "float16"):
            raise ProviderConfigError(
                f"fp16={options['fp16']!r} contradicts the cell's dtype {dtype}: migraphx_fp16_enable follows the "
                "dtypes axis (1 for float16 cells); set dtypes = [\"float16\"] in the profile instead")
        po[names["fp16"]] = _flag(dtype == "float16")
        if "int8" in options:
            raise ProviderConfigError(
                "the bare `int8` flag is gone: migraphx_int8_enable follows the quantizations axis; use "
                "quantizations = [\"int8-static\"] (MIGraphX quantizes the float graph with a calibration table)")
        if quantization == "int8-static":
            if not calibration_table:
                raise ProviderConfigError(
                    "int8-static on MIGraphX needs a calibration table: the EP quantizes only when one is given "
                    "(int8_enable && int8_calibration_cache_available in migraphx_execution_provider.cc), otherwise "
                    "it silently runs the float graph; set int8_calibration_table or let perfsuite build one")
            po[names["int8"]] = "1"
            po[names["int8_calibration_table"]] = str(calibration_table)
            if options.get("int8_native_calibration_table"):  # the EP's default (0) needs no key
                po[names["int8_native_calibration_table"]] = "1"
        else:
            po[names["int8"]] = "0"
        for key in ("exhaustive_tune", "model_cache_dir"):
            if key in options:
                if key not in names:
                    where, _ = migraphx_python_keys(ort_version)
                    raise ProviderConfigError(f"MIGraphX option {key!r}: onnxruntime {ort_version}'s Python API has "
                                              f"no such key ({PYBIND_SOURCE}, {where})")
                po[names[key]] = _flag(options[key]) if key == "exhaustive_tune" else str(options[key])
        for key in ("mem_limit", "arena_extend_strategy"):
            if key in options:
                raise ProviderConfigError(
                    f"MIGraphX option {key!r}: no onnxruntime version's Python API accepts a MIGraphX {key} "
                    f"(checked {PYBIND_SOURCE} from 1.17 to 1.23); drop it from "
                    f"[tool.perfsuite.backend_options.{backend}]")
        # MIGraphX's offload_copy is a compile flag the EP sets itself (ORT owns the host<->device copies,
        # IO binding keeps tensors on the device); no ORT version exposes it as a provider option.
        if options.get("offload_copy"):
            raise ProviderConfigError(
                "offload_copy=true: ORT's MIGraphX EP has no such provider option (the EP compiles with "
                "offload_copy off and does the copies itself); use io_binding=false to measure host-side "
                "inputs/outputs instead")
    elif ep in ("ROCMExecutionProvider", "CUDAExecutionProvider"):
        rocm = ep == "ROCMExecutionProvider"
        if rocm:
            po["tunable_op_enable"] = _flag(options.get("tunable_op", False))
            po["tunable_op_tuning_enable"] = _flag(options.get("tunable_op_tuning", False))
        if "mem_limit" in options:  # the device-memory arena, the same keys on both
            po["gpu_mem_limit"] = str(int(options["mem_limit"]))
        if "arena_extend_strategy" in options:
            po["arena_extend_strategy"] = str(options["arena_extend_strategy"])
        if not rocm and "cudnn_conv_algo_search" in options:
            po["cudnn_conv_algo_search"] = str(options["cudnn_conv_algo_search"])
        if not rocm and "use_tf32" in options:
            po["use_tf32"] = _flag(options["use_tf32"])
        if options.get("enable_graph"):
            po["enable_hip_graph" if rocm else "enable_cuda_graph"] = "1"
    elif ep == "DmlExecutionProvider":
        attrs["enable_mem_pattern"] = False  # DirectML requires both
        attrs["execution_mode"] = "sequential"
    if isinstance(options.get("provider_options"), dict):  # escape hatch: raw provider options, verbatim
        po.update({str(k): str(v) for k, v in options["provider_options"].items()})
    if ep == "MIGraphXExecutionProvider":  # the escape hatch too: a wrong key would silently run on the CPU
        where, keys = migraphx_python_keys(ort_version)
        bad = sorted(set(po) - keys)
        if bad:
            raise ProviderConfigError(
                f"MIGraphX provider option(s) {', '.join(bad)} are not accepted by onnxruntime {ort_version}'s "
                f"Python API (it would raise 'Invalid MIGraphX EP option' and fall back to the CPU); it accepts "
                f"{', '.join(sorted(keys))} ({PYBIND_SOURCE}, {where})")
    if "threads" in options:
        attrs["intra_op_num_threads"] = int(options["threads"])
    if "inter_op_threads" in options:
        attrs["inter_op_num_threads"] = int(options["inter_op_threads"])

    if strict:
        entries[DISABLE_CPU_FALLBACK] = "1"
    entries[RECORD_ASSIGNMENT] = "1"
    if "allow_spinning" in options:  # ORT's intra-op pool spin-waits after each run by default (steals CPU)
        entries["session.intra_op.allow_spinning"] = _flag(options["allow_spinning"])
    io_binding = bool(options.get("io_binding", is_device))
    fallback = is_device and not strict  # the CPU EP listed after the device's, for the nodes it lacks
    return SessionConfig(provider=ep, providers=[ep, CPU_EP] if fallback else [ep],
                         provider_options=[po, {}] if fallback else [po],
                         config_entries=entries, graph_optimization_level=level, strict=strict,
                         io_binding=io_binding, io_device=str(options.get("iobinding_device", io_device)),
                         device_id=device_id, session_attrs=attrs)


def session_options(ort: Any, cfg: SessionConfig) -> Any:
    """The ``ort.SessionOptions`` of a config (ORT's own log at severity 3: errors and worse)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[cfg.graph_optimization_level])
    so.log_severity_level = 3
    for k, v in cfg.config_entries.items():
        so.add_session_config_entry(k, v)
    for k, v in cfg.session_attrs.items():
        if k == "execution_mode":
            v = ort.ExecutionMode.ORT_SEQUENTIAL if v == "sequential" else ort.ExecutionMode.ORT_PARALLEL
        setattr(so, k, v)
    return so


def short_ep(name: str) -> str:
    return name.removesuffix("ExecutionProvider")


def availability_reason(backend: str, available: Iterable[str], ort_version: str) -> str | None:
    """``None`` if the installed ORT offers the backend's EP, else a reason naming the package to install."""
    ep, _, package = EP_OF_BACKEND[backend]
    available = list(available)
    if ep in available:
        return None
    names = ", ".join(short_ep(p) for p in available) or "none"
    hint = f"install {package}"
    if ep == "ROCMExecutionProvider" and _version_tuple(ort_version) >= (1, 23):
        hint += " (or use onnxruntime-migraphx cells)"
    return f"onnxruntime {ort_version} has no {ep} (available: {names}); {hint}"


class ProviderFallbackError(RuntimeError):
    """The session does not run on the requested provider (ORT fell back); never measured as that provider."""


def check_providers_in_use(requested: str, in_use: list[str]) -> None:
    """Raise if ORT dropped the requested provider (its Python-level fallback re-creates a CPU-only session)."""
    if not in_use or in_use[0] != requested:
        raise ProviderFallbackError(
            f"onnxruntime fell back: requested {requested} but the session runs on {in_use or 'nothing'}; "
            "the provider failed to initialise (check the driver/runtime libraries, e.g. with "
            "`python -c \"import onnxruntime as o; o.InferenceSession(path, providers=[...])\"` at log level 0)")


_CONFLICT = re.compile(r"Conflicting session configuration.*disabled fallback to the CPU EP", re.S)


def explain_session_error(message: str, backend: str) -> str | None:
    """A clear message for known session-creation failures, or ``None`` if the error is not recognised."""
    if _CONFLICT.search(message):
        return (f"{backend}: ORT refuses session.disable_cpu_ep_fallback=1 together with CPUExecutionProvider "
                f"in the provider list ({message.strip()}). Fix: strict mode must not list the CPU EP (perfsuite "
                f"does that itself); on onnxruntime-cpu drop `strict`, or set strict=false for {backend} in "
                f"[tool.perfsuite.backend_options.{backend}] to allow CPU nodes")
    if "fallback to the CPU EP has been explicitly disabled" in message or (
            "assigned to the default CPU EP" in message):
        return (f"{backend}: some graph nodes are not supported by the requested provider and strict mode forbids "
                f"running them on the CPU ({message.strip()}). Fix: set strict=false in "
                f"[tool.perfsuite.backend_options.{backend}] to measure with CPU nodes (counted in "
                f"backend_info.cpu_node_count)")
    return None


def count_assignment(subgraphs: Iterable[Any]) -> dict[str, int]:
    """Nodes per EP from ``InferenceSession.get_provider_graph_assignment_info()`` (ORT >= 1.32) or its JSON
    dump: a sequence of objects / dicts with ``ep_name`` and ``get_nodes()`` / ``nodes``."""
    counts: Counter[str] = Counter()
    for sub in subgraphs:
        ep, nodes = (sub["ep_name"], sub["nodes"]) if isinstance(sub, dict) else (sub.ep_name, sub.get_nodes())
        counts[ep] += len(nodes)
    return dict(counts)


_PLACED = re.compile(r"(?:Node\(s\)|All nodes) placed on \[(\w+)\]\.\s*Number of nodes:\s*(\d+)")


def parse_node_placements(log_text: str) -> dict[str, int]:
    """Nodes per EP from ORT's verbose session log (``VerifyEachNodeIsAssignedToAnEp``): either one line
    ``All nodes placed on [EP]. Number of nodes: N`` or one ``Node(s) placed on [EP]. Number of nodes: N`` per
    EP. Empty dict if the log holds no placement report."""
    return {m.group(1): int(m.group(2)) for m in _PLACED.finditer(log_text)}


def cpu_node_summary(counts: dict[str, int]) -> dict[str, int]:
    return {"cpu_node_count": int(counts.get(CPU_EP, 0)), "total_node_count": int(sum(counts.values()))}


def dumps_assignment(subgraphs: Iterable[Any]) -> str:
    return json.dumps([{"ep_name": s.ep_name, "nodes": [{"name": n.name, "op_type": n.op_type, "domain": n.domain}
                                                        for n in s.get_nodes()]} for s in subgraphs])
