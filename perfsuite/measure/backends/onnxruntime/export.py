"""Export a transformers causal LM to a decoder-with-past ONNX model, verify it, and cache it on disk.

The graph's interface (dynamic and static KV layouts), its numpy feeds and the parity check against torch are in
:mod:`.decoder_io`; the trace (``torch.onnx.export(dynamo=False)`` of a wrapper that turns the flat past tensors into
a transformers cache) in :mod:`.tracing`; the cache entries, keyed by :attr:`ExportSpec.key`, in :mod:`.entries`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.facts import models
from perfsuite.measure.backends.onnxruntime import entries, tracing
from perfsuite.measure.backends.onnxruntime.decoder_io import ExportError, verify_parity
from perfsuite.measure.backends.onnxruntime.entries import MODEL_FILE

EXPORT_VERSION = 1  # bump when the graph interface or the export recipe changes
STATIC_EXPORT_VERSION = 1  # the same for the static layout (its keys carry it; dynamic keys stay as they were)
LAYOUTS = ("dynamic", "static")
DEFAULT_OPSET = 17
ORT_DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class ExportSpec:
    model_dir: Path
    digest: str
    dtype: str = "float32"
    opset: int = DEFAULT_OPSET
    attn_implementation: str = "sdpa"
    layout: str = "dynamic"  # one of LAYOUTS

    @property
    def exporter_version(self) -> str:
        import torch
        import transformers

        static = f"+s{STATIC_EXPORT_VERSION}" if self.layout == "static" else ""
        return f"torch-{torch.__version__}+transformers-{transformers.__version__}+e{EXPORT_VERSION}{static}"

    @property
    def key(self) -> str:
        tag = hashlib.sha256(self.exporter_version.encode()).hexdigest()[:8]
        name = Path(self.model_dir).name.replace("_", "-").lower().removesuffix(f"-{self.digest}")[:40]
        attn = "" if self.attn_implementation == "sdpa" else f"-{self.attn_implementation}"
        layout = "" if self.layout == "dynamic" else f"-{self.layout}"
        return f"{name}-{self.digest}-{self.dtype}-op{self.opset}{attn}{layout}-x{tag}"


@dataclass
class ExportResult:
    path: Path  # the model.onnx
    meta: dict[str, Any]
    cache_hit: bool
    seconds: float  # export (+ verification) time when built now; the recorded build time on a hit


def model_digest(model_dir: Path) -> str:
    """The weights' identity: a materialised preset's digest, else a hash of the checkpoint files."""
    marker = Path(model_dir) / models.MARKER
    try:
        return str(json.loads(marker.read_text())["digest"])
    except (OSError, ValueError, KeyError):
        return models.checkpoint_digest(Path(model_dir))


def export(spec: ExportSpec, cache_dir: Path | None = None, verify: bool = True) -> ExportResult:
    """Return a verified cached export of ``spec``, building it if the cache has no sound entry."""
    if spec.dtype not in ORT_DTYPES:
        raise ExportError(f"onnxruntime cells support {', '.join(ORT_DTYPES)}, not {spec.dtype}")
    if spec.layout not in LAYOUTS:
        raise ExportError(f"decoder layout {spec.layout!r}: use one of {', '.join(LAYOUTS)}")
    target = (cache_dir or models.default_cache_dir()) / "onnx" / spec.key
    meta = entries.read_entry(target) if target.exists() else None
    rebuilt_because = None
    if meta is not None and (mismatch := entries.model_mismatch(target, spec.model_dir, spec.dtype)):
        rebuilt_because = f"cached entry {target} was not an export of {spec.model_dir}: {mismatch}"
        meta = None  # rebuild it like a corrupt entry, and say so
    if meta is not None and (meta.get("verification") or not verify):
        _raise_if_failed(meta)
        return ExportResult(target / MODEL_FILE, meta, True, float(meta.get("export_seconds", 0.0)))
    t0 = time.perf_counter()
    with entries.building(target) as tmp:
        model = tracing.load_torch_model(spec.model_dir, spec.dtype, spec.attn_implementation)
        layers, kv_heads, head_dim = tracing.kv_geometry(model.config)
        tracing.torch_export(model, tmp / MODEL_FILE, spec.dtype, spec.opset, spec.layout)
        tracing.consolidate(tmp)
        export_s = time.perf_counter() - t0
        import onnx

        onnx.checker.check_model(str(tmp / MODEL_FILE))
        problems = tracing.static_dim_problems(tmp / MODEL_FILE, spec.layout)
        if problems:
            raise ExportError(f"exported graph has static dimensions that must be dynamic: {', '.join(problems)}")
        import torch
        import transformers

        meta = {"kind": "export", "model_dir": str(spec.model_dir), "digest": spec.digest, "dtype": spec.dtype,
                "opset": spec.opset, "attn_implementation": spec.attn_implementation,
                "exporter_version": spec.exporter_version, "torch": torch.__version__,
                "transformers": transformers.__version__, "export_version": EXPORT_VERSION, "layout": spec.layout,
                "geometry": {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim,
                             "vocab": int(model.config.get_text_config(decoder=True).vocab_size)},
                "export_seconds": round(export_s, 3)}
        if verify:
            v0 = time.perf_counter()
            meta["verification"] = verify_parity(model, tmp / MODEL_FILE, meta)
            meta["verification"]["seconds"] = round(time.perf_counter() - v0, 3)
        if rebuilt_because:
            meta["rebuilt_because"] = rebuilt_because
        del model
        try:
            meta = entries.write_entry(tmp, target, meta)  # as recorded: with the files' sizes and hashes
        except OSError as exc:
            why = f"{rebuilt_because}; " if rebuilt_because else ""
            raise ExportError(f"{why}cannot replace the ONNX cache entry {target} ({exc}); remove that directory by "
                              "hand (rm -r) or point PERFSUITE_CACHE_DIR / [tool.perfsuite] cache_dir elsewhere") from exc
        if rebuilt_because and entries.model_mismatch(target, spec.model_dir, spec.dtype):
            raise ExportError(f"{rebuilt_because}; it could not be replaced: remove {target} by hand (rm -r) or point "
                              "PERFSUITE_CACHE_DIR / [tool.perfsuite] cache_dir elsewhere")
    _raise_if_failed(meta)
    return ExportResult(target / MODEL_FILE, meta, False, time.perf_counter() - t0)


def _raise_if_failed(meta: dict[str, Any]) -> None:
    v = meta.get("verification")
    if v and not v.get("ok"):
        raise ExportError("ONNX export disagrees with torch at " + "; ".join(v.get("failures", [])))
