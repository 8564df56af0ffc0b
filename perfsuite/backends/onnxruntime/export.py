"""Export a transformers causal LM to a decoder-with-past ONNX model, verify it, and cache it on disk.

Graph interface (every model, every dtype)::

    inputs   input_ids       int64 [batch, seq]
             attention_mask  int64 [batch, total]        (total = past + seq; all ones: no padding)
             position_ids    int64 [batch, seq]
             past_key_values.{i}.key / .value  dtype [batch, kv_heads, past, head_dim]
    outputs  logits          dtype [batch, vocab]        (last position only)
             next_token      int64 [batch]               (greedy: argmax of logits)
             present.{i}.key / .value          dtype [batch, kv_heads, total, head_dim]

A prefill passes past tensors with ``past = 0``.

The *static* layout (``ExportSpec(layout="static")``, a second export of the same model) keeps the KV cache in
fixed-capacity buffers, for execution providers that compile per input shape (MIGraphX) and for graph capture
(CUDA/HIP graphs, TensorRT), where the dynamic layout's past length grows by one every step::

    inputs   input_ids       int64 [batch, seq]
             attention_mask  int64 [batch, capacity]     (1 = slot holds a token of this sequence: the valid part)
             position_ids    int64 [batch, seq]          (absolute positions = the cache slots written this step)
             past_key_values.{i}.key / .value  dtype [batch, kv_heads, capacity, head_dim]
    outputs  logits, next_token                          (as above)
             present.{i}.key / .value          dtype [batch, kv_heads, capacity, head_dim]  (past with the new
                                                                                              slots written)

Slot ``j`` holds the token at position ``j``; a query at position ``q`` attends to slot ``j`` iff
``attention_mask[j] == 1`` and ``j <= q``. ``capacity``, ``batch`` and ``seq`` stay symbolic in the file; a session
pins them with free-dimension overrides (``capacity`` = the scenario's prompt + new tokens), so every run of it
sees one shape: a prefill session (``seq`` = prompt) and a decode session (``seq`` = 1).

The exporter is ``torch.onnx.export(dynamo=False)`` (TorchScript)
of a wrapper that builds a transformers ``DynamicCache`` from the flat past tensors and flattens the returned
cache. Cache entries live in ``<cache>/onnx/<key>/`` (model.onnx + perfsuite-onnx.json), keyed by the model
digest, dtype, opset, attention implementation and exporter version (torch + transformers + EXPORT_VERSION).
An entry is built in a temporary directory and renamed into place; the marker is written last and records
file sizes and SHA-256s, and the verification result, so a partial or corrupt entry is rebuilt, never loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

EXPORT_VERSION = 1  # bump when the graph interface or the export recipe changes
STATIC_EXPORT_VERSION = 1  # the same for the static layout (its keys carry it; dynamic keys stay as they were)
LAYOUTS = ("dynamic", "static")
DEFAULT_OPSET = 17
MARKER = "perfsuite-onnx.json"
MODEL_FILE = "model.onnx"
SHA_LIMIT = 256 << 20  # files above this are checked by size only (hashing 14 GB on every load is too slow)

# (batch, prompt, decode steps) for parity; the export dummy is (2, 3, past 5): every case differs from it.
VERIFY_CASES: tuple[tuple[int, int, int], ...] = ((1, 1, 2), (1, 6, 3), (3, 9, 2), (4, 17, 2))
DYNAMIC_DIMS: dict[str, tuple[int, ...]] = {"input_ids": (0, 1), "attention_mask": (0, 1), "position_ids": (0, 1),
                                            "logits": (0,), "next_token": (0,)}
KV_DYNAMIC_DIMS = (0, 2)
# The static layout: which axes stay symbolic in the file (and their names, pinned per session).
STATIC_DIM_NAMES: dict[str, dict[int, str]] = {"input_ids": {0: "batch", 1: "seq"},
                                                "attention_mask": {0: "batch", 1: "capacity"},
                                                "position_ids": {0: "batch", 1: "seq"},
                                                "logits": {0: "batch"}, "next_token": {0: "batch"}}
STATIC_KV_DIM_NAMES = {0: "batch", 2: "capacity"}
ORT_DTYPES = ("float32", "float16")


class ExportError(RuntimeError):
    """Export or its verification failed; the message names the shapes/dimensions that disagree."""


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
    from perfsuite import models

    marker = Path(model_dir) / models.MARKER
    try:
        return str(json.loads(marker.read_text())["digest"])
    except (OSError, ValueError, KeyError):
        return models._checkpoint_digest(Path(model_dir))


def io_names(num_layers: int) -> tuple[list[str], list[str]]:
    kv = [f"{i}.{t}" for i in range(num_layers) for t in ("key", "value")]
    return (["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{n}" for n in kv],
            ["logits", "next_token"] + [f"present.{n}" for n in kv])


def onnx_cache_dir(cache_dir: Path | None = None) -> Path:
    from perfsuite import models

    return (cache_dir or models.default_cache_dir()) / "onnx"


# --------------------------------------------------------------------------------------------- cache entries

def file_record(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    sha = None
    if size <= SHA_LIMIT:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        sha = h.hexdigest()
    return {"size": size, "sha256": sha}


def entry_problem(entry: Path, run_checker: bool = True) -> str | None:
    """Why a cache entry must not be loaded (missing marker, size/sha mismatch, onnx.checker failure) or None."""
    try:
        meta = json.loads((entry / MARKER).read_text())
    except FileNotFoundError:
        return "no marker (partial entry)"
    except (OSError, ValueError) as exc:
        return f"unreadable marker: {exc}"
    files = meta.get("files")
    if not isinstance(files, dict) or MODEL_FILE not in files:
        return "marker lists no model file"
    for name, rec in files.items():
        f = entry / name
        if not f.is_file():
            return f"{name} missing"
        if f.stat().st_size != rec.get("size"):
            return f"{name} size {f.stat().st_size} != recorded {rec.get('size')}"
        if rec.get("sha256") and file_record(f)["sha256"] != rec["sha256"]:
            return f"{name} sha256 mismatch"
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
    cfg = cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg
    heads = int(cfg["num_attention_heads"])
    return {"layers": int(cfg["num_hidden_layers"]), "kv_heads": int(cfg.get("num_key_value_heads") or heads),
            "head_dim": int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads), "vocab": int(cfg["vocab_size"])}


def _graph_geometry(graph: Any) -> dict[str, int | None]:
    def dim(vi: Any, axis: int) -> int | None:
        dims = vi.type.tensor_type.shape.dim
        return int(dims[axis].dim_value) if axis < len(dims) and dims[axis].dim_value else None

    pasts = [vi for vi in graph.input if vi.name.startswith("past_key_values.")]
    logits = [vi for vi in graph.output if vi.name == "logits"]
    return {"layers": len(pasts) // 2, "kv_heads": dim(pasts[0], 1) if pasts else None,
            "head_dim": dim(pasts[0], 3) if pasts else None, "vocab": dim(logits[0], 1) if logits else None}


def _embedding(model_dir: Path) -> tuple[str, Any] | None:
    """The token-embedding matrix of a checkpoint (``*embed_tokens.weight``), read from its safetensors."""
    from safetensors import safe_open

    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), "np" if _np_readable(f) else "pt") as fh:
            for k in fh.keys():
                if k.endswith("embed_tokens.weight"):
                    t = fh.get_tensor(k)
                    return k, t if isinstance(t, np.ndarray) else t.float().numpy()
    return None


def _np_readable(f: Path) -> bool:
    """safetensors' numpy reader cannot read bfloat16."""
    with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        return b'"BF16"' not in fh.read(n)


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
    if entry_problem(entry) is not None:
        return None
    meta: dict[str, Any] = json.loads((entry / MARKER).read_text())
    return meta


def write_entry(tmp: Path, target: Path, meta: dict[str, Any]) -> None:
    """Record files + marker in ``tmp`` and rename it to ``target`` (replacing a broken entry)."""
    meta = dict(meta)
    meta["files"] = {f.name: file_record(f) for f in sorted(tmp.iterdir()) if f.is_file() and f.name != MARKER}
    (tmp / MARKER).write_text(json.dumps(meta, indent=1, sort_keys=True))
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        # Another process won the race with a complete entry: use theirs.
        shutil.rmtree(tmp, ignore_errors=True)
        if entry_problem(target, run_checker=False) is not None:
            raise


def new_tmp(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))


# --------------------------------------------------------------------------------------------- export

def load_torch_model(model_dir: Path, dtype: str, attn_implementation: str = "sdpa") -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, dtype), attn_implementation=attn_implementation,
        use_safetensors=True, local_files_only=True, trust_remote_code=False)
    return model.eval()


def kv_geometry(config: Any) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a transformers text config."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    return int(cfg.num_hidden_layers), kv_heads, head_dim


def _wrapper(model: Any, num_layers: int) -> Any:
    import torch
    from transformers import DynamicCache

    class DecoderWithPast(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any) -> Any:
            cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(num_layers)])
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True, logits_to_keep=1)
            logits = out.logits[:, -1, :]
            flat = []
            for layer in out.past_key_values.layers:
                flat += [layer.keys, layer.values]
            return (logits, logits.float().argmax(dim=-1), *flat)

    return DecoderWithPast().eval()


def _static_wrapper(model: Any, num_layers: int) -> Any:
    """The static layout: the flat fixed-capacity past tensors become a transformers ``Cache`` whose layers write
    the new keys/values into the slots ``position_ids`` names (``index_copy``, out of place: the graph outputs the
    written buffers) and hand the whole capacity to attention, under a 4-D additive mask built from
    ``attention_mask`` (valid slots) and causality (slot <= query position). A 4-D mask is used by transformers as
    it is, so the model's own mask construction (which would assume a dynamic cache) is not traced."""
    import torch
    from transformers.cache_utils import Cache, CacheLayerMixin

    class _FixedCapacityLayer(CacheLayerMixin):
        is_compileable = True
        is_sliding = False

        def __init__(self, keys: Any, values: Any, write_pos: Any) -> None:
            super().__init__()
            self.buffers: list[Any] = [keys, values]
            self.write_pos = write_pos
            self.max_cache_len = keys.shape[2]
            self.is_initialized = True  # the buffers are the graph inputs: nothing to allocate

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            pass

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            self.buffers = [self.buffers[0].index_copy(2, self.write_pos, key_states),
                            self.buffers[1].index_copy(2, self.write_pos, value_states)]
            return self.buffers[0], self.buffers[1]

        def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
            return self.max_cache_len, 0

        def get_seq_length(self) -> int:
            return 0  # positions are always passed explicitly

        def get_max_length(self) -> int:
            return int(self.max_cache_len)

    class StaticDecoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any) -> Any:
            # one write position per step for the whole batch (prompts of one batch have equal length: no padding)
            layers = [_FixedCapacityLayer(past[2 * i], past[2 * i + 1], position_ids[0]) for i in range(num_layers)]
            cache = Cache(layers=list[Any](layers))
            slots = torch.arange(past[0].shape[2], device=input_ids.device)
            allowed = (attention_mask[:, None, None, :] > 0) & (slots[None, None, None, :] <= position_ids[:, None, :, None])
            dtype = past[0].dtype
            mask = torch.zeros(allowed.shape, dtype=dtype, device=input_ids.device).masked_fill(
                ~allowed, torch.finfo(dtype).min)
            out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True, logits_to_keep=1)
            logits = out.logits[:, -1, :]
            flat = []
            for layer in layers:
                flat += layer.buffers
            return (logits, logits.float().argmax(dim=-1), *flat)

    return StaticDecoder().eval()


def torch_export(model: Any, path: Path, dtype: str, opset: int, layout: str = "dynamic") -> None:
    """``torch.onnx.export`` (TorchScript exporter) with dynamic batch / sequence / past axes (``layout="dynamic"``)
    or symbolic batch / sequence / capacity axes over fixed-capacity KV buffers (``layout="static"``)."""
    import torch

    layers, kv_heads, head_dim = kv_geometry(model.config)
    b, s, p = 2, 3, 5
    ids = torch.randint(4, 100, (b, s), dtype=torch.long)
    pos = torch.arange(p, p + s, dtype=torch.long)[None].expand(b, s).contiguous()
    tdtype = getattr(torch, dtype)
    inputs, outputs = io_names(layers)
    if layout == "static":
        capacity = p + s + 3  # slots beyond the valid part, as in every decode step but the last
        wrapper = _static_wrapper(model, layers)
        mask = torch.zeros(b, capacity, dtype=torch.long)
        mask[:, :p + s] = 1
        past = [torch.randn(b, kv_heads, capacity, head_dim, dtype=tdtype) for _ in range(2 * layers)]
        axes = {k: dict(v) for k, v in STATIC_DIM_NAMES.items()}
        for n in inputs[3:] + outputs[2:]:
            axes[n] = dict(STATIC_KV_DIM_NAMES)
    else:
        wrapper = _wrapper(model, layers)
        mask = torch.ones(b, p + s, dtype=torch.long)
        past = [torch.randn(b, kv_heads, p, head_dim, dtype=tdtype) for _ in range(2 * layers)]
        axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
                "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch"}, "next_token": {0: "batch"}}
        for n in inputs[3:]:
            axes[n] = {0: "batch", 2: "past"}
        for n in outputs[2:]:
            axes[n] = {0: "batch", 2: "total"}
    with warnings.catch_warnings(), torch.no_grad():
        # TracerWarnings, the legacy-exporter DeprecationWarning, aten::index notes: the parity check below is
        # what decides whether the trace is right.
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, (ids, mask, pos, *past), str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes=axes, opset_version=opset, dynamo=False, do_constant_folding=True)


def _consolidate(tmp: Path) -> None:
    """Large models: the exporter may write one external-data file per tensor; keep one ``model.onnx.data``."""
    extra = [f for f in tmp.iterdir() if f.name != MODEL_FILE]
    if not extra:
        return
    import onnx

    proto = onnx.load(str(tmp / MODEL_FILE), load_external_data=True)
    for f in extra:
        f.unlink()
    onnx.save(proto, str(tmp / MODEL_FILE), save_as_external_data=True, all_tensors_to_one_file=True,
              location=MODEL_FILE + ".data", size_threshold=1024)


def static_dim_problems(onnx_path: Path, layout: str = "dynamic") -> list[str]:
    """Every intended-symbolic dimension must be symbolic (``dim_param``) in the saved graph; in the static layout
    it must also carry its name (``capacity`` shared by the mask and every KV buffer, so one override pins all)."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    problems = []
    for vi in list(graph.input) + list(graph.output):
        kv = vi.name.startswith(("past_", "present."))
        if layout == "static":
            named = STATIC_DIM_NAMES.get(vi.name, STATIC_KV_DIM_NAMES if kv else {})
        else:
            named = {a: "" for a in DYNAMIC_DIMS.get(vi.name, KV_DYNAMIC_DIMS if kv else ())}
        dims = vi.type.tensor_type.shape.dim
        for axis, name in named.items():
            if axis >= len(dims) or not dims[axis].dim_param or (name and dims[axis].dim_param != name):
                val = (dims[axis].dim_param or dims[axis].dim_value) if axis < len(dims) else "missing"
                problems.append(f"{vi.name}[{axis}]={val}")
    return problems


# --------------------------------------------------------------------------------------------- running (numpy)

def layout_of(meta: dict[str, Any]) -> str:
    return str(meta.get("layout", "dynamic"))


def empty_past(meta: dict[str, Any], batch: int, capacity: int = 0) -> list[np.ndarray]:
    """The past of a prefill: length 0 (dynamic layout) or ``capacity`` zeroed slots (static layout; zeros, not
    garbage, because a masked slot still multiplies its value by a zero weight and NaN * 0 is NaN)."""
    g = meta["geometry"]
    n = capacity if layout_of(meta) == "static" else 0
    return [np.zeros((batch, g["kv_heads"], n, g["head_dim"]), dtype=np.dtype(meta["dtype"]))
            for _ in range(2 * g["layers"])]


def step_feeds(input_names: list[str], ids: np.ndarray, past_len: int, past: list[Any],
               capacity: int | None = None) -> dict[str, Any]:
    """Feeds of one step: ``ids`` [batch, seq] after ``past_len`` tokens. ``capacity`` set = the static layout
    (mask over the capacity, 1 for the slots filled after this step)."""
    b, s = ids.shape
    if capacity is None:
        mask = np.ones((b, past_len + s), dtype=np.int64)
    else:
        if past_len + s > capacity:
            raise ExportError(f"static decoder: {past_len + s} tokens do not fit its capacity {capacity}")
        mask = np.zeros((b, capacity), dtype=np.int64)
        mask[:, :past_len + s] = 1
    return {"input_ids": ids.astype(np.int64), "attention_mask": mask,
            "position_ids": np.broadcast_to(np.arange(past_len, past_len + s, dtype=np.int64), (b, s)).copy(),
            **(dict(zip(input_names[3:], past, strict=True)) if past else {})}


def ort_greedy_logits(sess: Any, meta: dict[str, Any], prompt: np.ndarray, forced: list[np.ndarray] | None = None,
                      steps: int = 0) -> list[Any]:
    """Last-position logits of a prefill and of one decode step per ``forced`` token column (teacher forcing);
    with ``forced=None``, ``steps`` decode steps on the model's own greedy tokens."""
    names = [i.name for i in sess.get_inputs()]
    b, p = prompt.shape
    n = len(forced) if forced is not None else steps
    cap = p + n if layout_of(meta) == "static" else None  # the static layout: capacity = prompt + decode steps
    out = sess.run(None, step_feeds(names, prompt, 0, empty_past(meta, b, cap or 0), cap))
    logits = [out[0].astype(np.float32)]
    past, past_len = out[2:], p
    for k in range(n):
        tok = forced[k] if forced is not None else out[1]
        out = sess.run(None, step_feeds(names, np.asarray(tok).reshape(b, 1), past_len, past, cap))
        logits.append(out[0].astype(np.float32))
        past, past_len = out[2:], past_len + 1
    return logits


def torch_greedy_logits(model: Any, prompt: np.ndarray, steps: int) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(prompt.astype(np.int64)), use_cache=True)
        logits = [out.logits[:, -1, :].float().numpy()]
        for _ in range(steps):
            nxt = out.logits[:, -1, :].argmax(-1)
            out = model(input_ids=nxt[:, None], past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits[:, -1, :].float().numpy())
    return logits


def compare_logits(ref: np.ndarray, got: np.ndarray, atol: float) -> tuple[float, int]:
    """(max abs diff, number of rows whose greedy token differs although the reference top-2 margin > 2*atol)."""
    diff = float(np.abs(ref - got).max())
    top2 = np.sort(ref, axis=-1)[:, -2:]
    decisive = (top2[:, 1] - top2[:, 0]) > 2 * atol
    wrong = int(np.sum((ref.argmax(-1) != got.argmax(-1)) & decisive))
    return diff, wrong


def tolerance(dtype: str, ref: np.ndarray) -> float:
    scale = max(1.0, float(np.abs(ref).max()))
    return (2e-4 if dtype == "float32" else 2e-2) * scale


def verify_parity(model: Any, onnx_path: Path, meta: dict[str, Any],
                  cases: tuple[tuple[int, int, int], ...] = VERIFY_CASES) -> dict[str, Any]:
    """Teacher-forced greedy parity of the ONNX model (CPU EP) against torch at several shapes."""
    import onnxruntime as ort

    from perfsuite import models

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    vocab = int(meta["geometry"]["vocab"])
    report: list[dict[str, Any]] = []
    bad: list[str] = []
    for b, p, steps in cases:
        prompt = np.array(models.prompts(b, p, vocab, seed=7), dtype=np.int64)
        ref = torch_greedy_logits(model, prompt, steps)
        forced = [r.argmax(-1) for r in ref[:-1]]
        got = ort_greedy_logits(sess, meta, prompt, forced)
        for k, (r, g) in enumerate(zip(ref, got, strict=True)):
            atol = tolerance(meta["dtype"], r)
            diff, wrong = compare_logits(r, g, atol)
            shape = f"(batch={b}, prompt={p}, past={0 if k == 0 else p + k - 1}, seq={p if k == 0 else 1})"
            report.append({"shape": shape, "max_abs_diff": diff, "atol": atol, "token_mismatches": wrong})
            if diff > atol or wrong:
                bad.append(f"{shape}: max|logit diff|={diff:.3g} (tol {atol:.3g}), {wrong} greedy token(s) differ")
    return {"ok": not bad, "failures": bad, "cases": report}


# --------------------------------------------------------------------------------------------- entry point

def export(spec: ExportSpec, cache_dir: Path | None = None, verify: bool = True) -> ExportResult:
    """Return a verified cached export of ``spec``, building it if the cache has no sound entry."""
    if spec.dtype not in ORT_DTYPES:
        raise ExportError(f"onnxruntime cells support {', '.join(ORT_DTYPES)}, not {spec.dtype}")
    if spec.layout not in LAYOUTS:
        raise ExportError(f"decoder layout {spec.layout!r}: use one of {', '.join(LAYOUTS)}")
    target = onnx_cache_dir(cache_dir) / spec.key
    meta = read_entry(target) if target.exists() else None
    rebuilt_because = None
    if meta is not None:
        mismatch = model_mismatch(target, spec.model_dir, spec.dtype)
        if mismatch:  # rebuild it like a corrupt entry, and say so
            rebuilt_because = f"cached entry {target} was not an export of {spec.model_dir}: {mismatch}"
            meta = None
    if meta is not None and (meta.get("verification") or not verify):
        _raise_if_failed(meta)
        return ExportResult(target / MODEL_FILE, meta, True, float(meta.get("export_seconds", 0.0)))
    t0 = time.perf_counter()
    tmp = new_tmp(target)
    try:
        model = load_torch_model(spec.model_dir, spec.dtype, spec.attn_implementation)
        layers, kv_heads, head_dim = kv_geometry(model.config)
        torch_export(model, tmp / MODEL_FILE, spec.dtype, spec.opset, spec.layout)
        _consolidate(tmp)
        export_s = time.perf_counter() - t0
        import onnx

        onnx.checker.check_model(str(tmp / MODEL_FILE))
        problems = static_dim_problems(tmp / MODEL_FILE, spec.layout)
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
            write_entry(tmp, target, meta)
        except OSError as exc:
            why = f"{rebuilt_because}; " if rebuilt_because else ""
            raise ExportError(f"{why}cannot replace the ONNX cache entry {target} ({exc}); remove that directory by "
                              "hand (rm -r) or point PERFSUITE_CACHE_DIR / [tool.perfsuite] cache_dir elsewhere") from exc
        if rebuilt_because and model_mismatch(target, spec.model_dir, spec.dtype):
            raise ExportError(f"{rebuilt_because}; it could not be replaced: remove {target} by hand (rm -r) or point "
                              "PERFSUITE_CACHE_DIR / [tool.perfsuite] cache_dir elsewhere")
        meta = json.loads((target / MARKER).read_text())  # as recorded: with the files' sizes and hashes
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _raise_if_failed(meta)
    return ExportResult(target / MODEL_FILE, meta, False, time.perf_counter() - t0)


def _raise_if_failed(meta: dict[str, Any]) -> None:
    v = meta.get("verification")
    if v and not v.get("ok"):
        raise ExportError("ONNX export disagrees with torch at " + "; ".join(v.get("failures", [])))
