"""The ONNX cache's entries: ``<cache>/onnx/<key>/`` (model.onnx + perfsuite-onnx.json, which also holds the
verification result), in the one cache format of :mod:`perfsuite.facts.cache_entry`; an entry whose graph is not an
export of the model it is keyed by (a copied or forged entry) is found by :func:`model_mismatch`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.facts import cache_entry
from perfsuite.facts.cache_entry import building, file_record  # noqa: F401  (re-exported: the export modules' names)
from perfsuite.facts.model_shape import ModelShape

MARKER = "perfsuite-onnx.json"
MODEL_FILE = "model.onnx"


def entry_problem(entry: Path, run_checker: bool = True) -> str | None:
    """Why a cache entry must not be loaded (missing marker, size/sha mismatch, onnx.checker failure) or None."""
    meta = cache_entry.read_marker(entry, MARKER)
    if isinstance(meta, str):
        return meta
    files = meta.get("files")
    if not isinstance(files, dict) or MODEL_FILE not in files:
        return "marker lists no model file"
    problem = cache_entry.files_problem(entry, files)
    if problem:
        return problem
    if run_checker:
        import onnx

        try:
            onnx.checker.check_model(str(entry / MODEL_FILE))
        except Exception as exc:  # onnx raises ValidationError and friends
            return f"onnx.checker: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return None


def _model_geometry(model_dir: Path) -> dict[str, int]:
    """(layers, kv_heads, head_dim, vocab) from a checkpoint's config.json, as kv_geometry reads a loaded model."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    shape = ModelShape.from_config(cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg)
    return {"layers": shape.layers, "kv_heads": shape.kv_heads, "head_dim": shape.head_dim, "vocab": shape.vocab}


def _graph_geometry(graph: Any) -> dict[str, int | None]:
    def dim(vi: Any, axis: int) -> int | None:
        dims = vi.type.tensor_type.shape.dim
        return int(dims[axis].dim_value) if axis < len(dims) and dims[axis].dim_value else None

    pasts = [vi for vi in graph.input if vi.name.startswith("past_key_values.")]
    logits = [vi for vi in graph.output if vi.name == "logits"]
    return {"layers": len(pasts) // 2, "kv_heads": dim(pasts[0], 1) if pasts else None,
            "head_dim": dim(pasts[0], 3) if pasts else None, "vocab": dim(logits[0], 1) if logits else None}


def _embedding(model_dir: Path) -> tuple[str, Any] | None:
    """The token-embedding matrix of a checkpoint (``*embed_tokens.weight``), read from its safetensors (bfloat16,
    which numpy lacks, as float32)."""
    import torch
    from safetensors import safe_open

    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for k in fh.keys():
                if k.endswith("embed_tokens.weight"):
                    t = fh.get_tensor(k)
                    return k, (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return None


def model_mismatch(entry: Path, model_dir: Path, dtype: str, weights: bool = True) -> str | None:
    """Why the graph in a cache entry is not an export of ``model_dir`` (its marker can be right and its file
    another model's: a copied or forged entry), or None. Compares the graph's KV/logit geometry with the model's
    config and the graph's embedding initializer with the checkpoint's embedding (in the export dtype)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(entry / MODEL_FILE), load_external_data=False)
    want, got = _model_geometry(model_dir), _graph_geometry(model.graph)
    diff = [f"{k} {got[k]} (model {want[k]})" for k in want if got[k] is not None and got[k] != want[k]]
    if diff:
        return "graph geometry " + ", ".join(diff)
    emb = _embedding(model_dir) if weights else None
    if emb is None:
        return None
    name, table = emb
    ref = table.astype(np.dtype(dtype))
    candidates = [t for t in model.graph.initializer if tuple(t.dims) == ref.shape]
    if not candidates:
        return None  # an exporter that folded the embedding away: nothing to compare
    for t in candidates:
        arr = numpy_helper.to_array(t, base_dir=str(entry))
        if arr.dtype == ref.dtype and np.array_equal(arr, ref):
            return None
    return f"no initializer of the graph equals the model's {name} (another model's weights)"


def read_entry(entry: Path) -> dict[str, Any] | None:
    return None if entry_problem(entry) is not None else json.loads((entry / MARKER).read_text())


def write_entry(tmp: Path, target: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Record files + marker in ``tmp``, rename it to ``target`` (replacing a broken entry); the marker's object."""
    return cache_entry.commit(tmp, target, meta, MARKER, sound=lambda t: entry_problem(t, run_checker=False) is None)
