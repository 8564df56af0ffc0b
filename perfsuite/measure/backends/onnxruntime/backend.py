"""ONNX Runtime backend: one class for every execution provider (``onnxruntime-{cpu,cuda,rocm,migraphx,dml}``).

``load()`` takes the verified decoder-with-past export from the cache (built on a miss), quantizes or calibrates it
as the cell asks and creates its session(s) on the cell's provider, refusing a silent fallback to another one; the
layout follows the provider (:func:`.providers.decoder_layout`). :mod:`.runners` feeds it, with IO binding on device
providers so that only the chosen token ids come back to the host.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.facts import cache
from perfsuite.facts.cells import Cell
from perfsuite.machine import memory
from perfsuite.measure.backends.base import MemoryStats, StepBackend, StepResult
from perfsuite.measure.backends.onnxruntime import export as ex
from perfsuite.measure.backends.onnxruntime import providers as pv
from perfsuite.measure.backends.onnxruntime import runners

VERIFY_MAX_BYTES = 1 << 30  # default: verify exports of checkpoints up to 1 GiB (cell option verify=true forces)


class OrtSessionError(RuntimeError):
    """Session creation failed for a known reason; the message names the fix."""


@contextlib.contextmanager
def capture_stderr_fd() -> Iterator[list[str]]:
    """Capture what native code writes to file descriptor 2 (ORT's default log sink) into ``out[0]``."""
    out: list[str] = [""]
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out[0] = tmp.read().decode("utf-8", "replace")


class OrtBackend(StepBackend):
    def __init__(self, cell: Cell, cache_dir: Path | None = None) -> None:
        self.cell = cell
        self.name = cell.backend
        self.export: ex.ExportResult | None = None
        self.quantized: ex.ExportResult | None = None
        self._info: dict[str, Any] = {}
        self.runner: runners.DynamicRunner | runners.StaticRunner | None = None
        self.cache_dir = cache_dir  # the session's [tool.perfsuite] cache_dir; None: perfsuite.facts.cache.root_for

    # ------------------------------------------------------------------------------------------- protocol
    def availability(self) -> str | None:
        try:
            import onnxruntime as ort
        except ImportError:
            return ("onnxruntime is not installed: pip install onnxruntime (CPU), onnxruntime-gpu, "
                    "onnxruntime-rocm or onnxruntime-migraphx")
        if self.cell.backend not in pv.EP_OF_BACKEND:
            return f"{self.cell.backend!r} is not an onnxruntime backend"
        layout, why = pv.decoder_layout(self.cell.backend, dict(self.cell.options))  # option errors raise
        reason = pv.availability_reason(self.cell.backend, ort.get_available_providers(), ort.__version__)
        if reason:
            return f"{reason} (the cell would run the {layout} decoder: {why})"
        if self.cell.dtype not in ex.ORT_DTYPES:
            return (f"onnxruntime cells run {' and '.join(ex.ORT_DTYPES)}; {self.cell.dtype} is not exported "
                    "(ORT's CPU/ROCm EPs lack bfloat16 kernels for most ops)")
        if self.cell.quantization not in pv.QUANTIZATIONS:
            return (f"onnxruntime cells support quantization {', '.join(pv.QUANTIZATIONS)}, not "
                    f"{self.cell.quantization}")
        if self.cell.quantization == "int8-static" and self.cell.backend != "onnxruntime-migraphx":
            return (f"int8-static is MIGraphX's calibrated int8 (migraphx_int8_enable + a calibration table); "
                    f"{self.cell.backend} cells take none or int8-dynamic")
        if self.cell.tensor_parallel_size != 1:
            return "onnxruntime cells run on one device; tensor parallelism is a vllm cell"
        try:
            import onnx  # noqa: F401
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as exc:
            return f"exporting to ONNX needs {exc.name}: pip install onnx torch transformers"
        return None

    def load(self) -> None:
        import onnxruntime as ort

        cell = self.cell
        assert cell.model_dir is not None, "cell.model_dir is filled in by the fixture"
        options = dict(cell.options)
        layout, why = pv.decoder_layout(cell.backend, options)
        spec = ex.ExportSpec(cell.model_dir, ex.model_digest(cell.model_dir), cell.dtype,
                             int(options.get("opset", ex.DEFAULT_OPSET)),
                             cell.attn_implementation if cell.attn_implementation in ("sdpa", "eager") else "sdpa",
                             layout)
        # Parity against torch runs on the CPU: by default only for models small enough to do it in seconds.
        weights = sum(f.stat().st_size for f in cell.model_dir.glob("*.safetensors"))
        verify = bool(options.get("verify", weights <= VERIFY_MAX_BYTES))
        self.export = ex.export(spec, cache_dir=cache.root_for(cell.model_dir, self.cache_dir), verify=verify)
        path = self.export.path
        if cell.quantization == "int8-dynamic":
            from perfsuite.measure.backends.onnxruntime.quantize import quantize

            self.quantized = quantize(self.export)
            path = self.quantized.path
        table = None
        if cell.quantization == "int8-static":
            from perfsuite.measure.backends.onnxruntime import calibration

            table = options.get("int8_calibration_table") or str(calibration.table_for(self.export, cell))
        cfg = pv.build_session_config(cell.backend, cell.dtype, options, ort.__version__, cell.quantization, table)
        sc = cell.scenario
        capacity = sc.prompt_tokens + sc.new_tokens
        record_api = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")
        use_log = bool(options.get("log_placements", not record_api))
        if layout == "static":
            sess, log_text = self._session(ort, path, cfg, use_log, {"batch": sc.batch_size,
                                                                     "seq": sc.prompt_tokens, "capacity": capacity})
            decode_sess, _ = self._session(ort, path, cfg, False, {"batch": sc.batch_size, "seq": 1,
                                                                    "capacity": capacity})
            self.runner = runners.StaticRunner(sess, decode_sess, cfg, self.export.meta, sc.batch_size,
                                               sc.prompt_tokens, capacity, graph=bool(options.get("enable_graph")))
        else:
            sess, log_text = self._session(ort, path, cfg, use_log, {})
            self.runner = runners.DynamicRunner(sess, cfg, self.export.meta)
        counts: dict[str, int] = {}
        source = None
        if record_api:
            with contextlib.suppress(Exception):  # recording not supported by this build/provider: use the log
                counts = pv.count_assignment(sess.get_provider_graph_assignment_info())
                source = "get_provider_graph_assignment_info"
        if not counts and log_text:
            counts = pv.parse_node_placements(log_text)
            source = "verbose_log" if counts else None
        meta = self.export.meta
        self._info = {
            "onnxruntime": ort.__version__, "provider": cfg.provider, "providers_requested": cfg.providers,
            "provider_options": cfg.provider_options, "providers_in_use": sess.get_providers(),
            "strict": cfg.strict, "graph_optimization_level": cfg.graph_optimization_level,
            "io_binding": cfg.io_binding, "opset": spec.opset, "exporter_version": spec.exporter_version,
            "export_cache_hit": self.export.cache_hit, "export_seconds": meta.get("export_seconds"),
            "export_cache_rebuilt": meta.get("rebuilt_because"),
            "load_export_seconds": round(self.export.seconds, 3),
            "verification": _verification_summary(meta.get("verification")) or "skipped (verify=false or large)",
            "onnx_model": str(path), "quantization": cell.quantization,
            "decoder_layout": layout, "decoder_layout_reason": why, "decoder": self.runner.info(),
            "node_counts": counts, "node_count_source": source,
            **(pv.cpu_node_summary(counts) if counts else {"cpu_node_count": None, "total_node_count": None}),
        }
        if table is not None:
            self._info["int8_calibration_table"] = table
        if self.quantized is not None:
            self._info.update(int8_top1_agreement=self.quantized.meta.get("int8_top1_agreement"),
                              quantize_cache_hit=self.quantized.cache_hit,
                              quantize_seconds=self.quantized.meta.get("quantize_seconds"))

    def _session(self, ort: Any, path: Path, cfg: pv.SessionConfig, use_log: bool,
                 pinned: dict[str, int]) -> tuple[Any, str]:
        """One session on the cell's provider (``pinned``: free-dimension overrides, the static decoder's shape);
        refuses a provider fallback."""
        so = pv.session_options(ort, cfg)
        for dim, value in pinned.items():
            so.add_free_dimension_override_by_name(dim, int(value))
        if use_log:
            so.log_severity_level = 0
            so.log_verbosity_level = 0
        try:
            with capture_stderr_fd() if use_log else contextlib.nullcontext([""]) as captured:
                sess = ort.InferenceSession(str(path), so, providers=cfg.providers,
                                            provider_options=cfg.provider_options)
        except Exception as exc:
            msg = pv.explain_session_error(str(exc), self.cell.backend)
            if msg:
                raise OrtSessionError(msg) from exc
            raise
        pv.check_providers_in_use(cfg.provider, sess.get_providers())
        return sess, captured[0]

    def prefill(self, prompts: list[list[int]]) -> StepResult:
        assert self.runner is not None, "load() first"
        return StepResult(*self.runner.prefill(np.asarray(prompts, dtype=np.int64)))

    def decode(self, state: runners.State) -> StepResult:
        assert self.runner is not None, "load() first"
        return StepResult(*self.runner.decode(state))

    def release(self, state: Any) -> None:
        del state

    def reset_peak_memory(self) -> None:
        memory.reset_peak_rss()

    def memory_stats(self) -> MemoryStats:
        # ORT's Python API exposes no device-arena statistics; device cells report host RSS only.
        return MemoryStats(peak_rss_bytes=memory.peak_rss_bytes())

    def info(self) -> dict[str, Any]:
        d = dict(self._info)
        if self.runner is not None:
            counts = self.runner.shapes.counts()
            d["input_shapes_per_generation"] = counts  # session -> distinct input shapes fed in one generation
            d["max_input_shapes_per_session"] = max(counts.values(), default=0)
        return d

    def close(self) -> None:
        self.runner = None  # with its sessions
        gc.collect()


def _verification_summary(v: dict[str, Any] | None) -> dict[str, Any] | None:
    if not v:
        return None
    worst = max((c["max_abs_diff"] / c["atol"] for c in v.get("cases", []) if c["atol"]), default=None)
    return {"ok": v.get("ok"), "shapes": len(v.get("cases", [])), "worst_diff_over_tol": worst,
            "seconds": v.get("seconds")}
