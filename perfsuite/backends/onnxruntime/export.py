"""Export a transformers causal LM to a decoder-with-past ONNX model, verify it, and cache it on disk.

Graph interface (every model, every dtype)::

    inputs   input_ids       int64 [batch, seq]
             attention_mask  int64 [batch, total]        (total = past + seq; all ones: no padding)
             position_ids    int64 [batch, seq]
             past_key_values.{i}.key / .value  dtype [batch, kv_heads, past, head_dim]
    outputs  logits          dtype [batch, vocab]        (last position only)
             next_token      int64 [batch]               (greedy: argmax of logits)
             present.{i}.key / .value          dtype [batch, kv_heads, total, head_dim]

A prefill passes past tensors with ``past = 0``. The exporter is ``torch.onnx.export(dynamo=False)`` (TorchScript)
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
DEFAULT_OPSET = 17
MARKER = "perfsuite-onnx.json"
MODEL_FILE = "model.onnx"
SHA_LIMIT = 256 << 20  # files above this are checked by size only (hashing 14 GB on every load is too slow)

# (batch, prompt, decode steps) for parity; the export dummy is (2, 3, past 5): every case differs from it.
VERIFY_CASES: tuple[tuple[int, int, int], ...] = ((1, 1, 2), (1, 6, 3), (3, 9, 2), (4, 17, 2))
DYNAMIC_DIMS: dict[str, tuple[int, ...]] = {"input_ids": (0, 1), "attention_mask": (0, 1), "position_ids": (0, 1),
                                            "logits": (0,), "next_token": (0,)}
KV_DYNAMIC_DIMS = (0, 2)
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

    @property
    def exporter_version(self) -> str:
        import torch
        import transformers

        return f"torch-{torch.__version__}+transformers-{transformers.__version__}+e{EXPORT_VERSION}"

    @property
    def key(self) -> str:
        tag = hashlib.sha256(self.exporter_version.encode()).hexdigest()[:8]
        name = Path(self.model_dir).name.replace("_", "-").lower().removesuffix(f"-{self.digest}")[:40]
        attn = "" if self.attn_implementation == "sdpa" else f"-{self.attn_implementation}"
        return f"{name}-{self.digest}-{self.dtype}-op{self.opset}{attn}-x{tag}"


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


def torch_export(model: Any, path: Path, dtype: str, opset: int) -> None:
    """``torch.onnx.export`` (TorchScript exporter) with dynamic batch / sequence / past axes."""
    import torch

    layers, kv_heads, head_dim = kv_geometry(model.config)
    wrapper = _wrapper(model, layers)
    b, s, p = 2, 3, 5
    ids = torch.randint(4, 100, (b, s), dtype=torch.long)
    mask = torch.ones(b, p + s, dtype=torch.long)
    pos = torch.arange(p, p + s, dtype=torch.long)[None].expand(b, s).contiguous()
    tdtype = getattr(torch, dtype)
    past = [torch.randn(b, kv_heads, p, head_dim, dtype=tdtype) for _ in range(2 * layers)]
    inputs, outputs = io_names(layers)
    axes: dict[str, dict[int, str]] = {"input_ids": {0: "batch", 1: "seq"},
                                       "attention_mask": {0: "batch", 1: "total"},
                                       "position_ids": {0: "batch", 1: "seq"},
                                       "logits": {0: "batch"}, "next_token": {0: "batch"}}
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


def static_dim_problems(onnx_path: Path) -> list[str]:
    """Every intended-dynamic dimension must be symbolic (``dim_param``) in the saved graph."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    problems = []
    for vi in list(graph.input) + list(graph.output):
        dyn = DYNAMIC_DIMS.get(vi.name, KV_DYNAMIC_DIMS if vi.name.startswith(("past_", "present.")) else ())
        dims = vi.type.tensor_type.shape.dim
        for axis in dyn:
            if axis >= len(dims) or not dims[axis].dim_param:
                val = dims[axis].dim_value if axis < len(dims) else "missing"
                problems.append(f"{vi.name}[{axis}]={val}")
    return problems


# --------------------------------------------------------------------------------------------- running (numpy)

def empty_past(meta: dict[str, Any], batch: int) -> list[np.ndarray]:
    g = meta["geometry"]
    return [np.zeros((batch, g["kv_heads"], 0, g["head_dim"]), dtype=np.dtype(meta["dtype"]))
            for _ in range(2 * g["layers"])]


def step_feeds(input_names: list[str], ids: np.ndarray, past_len: int, past: list[Any]) -> dict[str, Any]:
    b, s = ids.shape
    return {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((b, past_len + s), dtype=np.int64),
            "position_ids": np.broadcast_to(np.arange(past_len, past_len + s, dtype=np.int64), (b, s)).copy(),
            **(dict(zip(input_names[3:], past, strict=True)) if past else {})}


def ort_greedy_logits(sess: Any, meta: dict[str, Any], prompt: np.ndarray, forced: list[np.ndarray] | None = None,
                      steps: int = 0) -> list[Any]:
    """Last-position logits of a prefill and of one decode step per ``forced`` token column (teacher forcing);
    with ``forced=None``, ``steps`` decode steps on the model's own greedy tokens."""
    names = [i.name for i in sess.get_inputs()]
    b, p = prompt.shape
    out = sess.run(None, step_feeds(names, prompt, 0, empty_past(meta, b)))
    logits = [out[0].astype(np.float32)]
    past, past_len = out[2:], p
    n = len(forced) if forced is not None else steps
    for k in range(n):
        tok = forced[k] if forced is not None else out[1]
        out = sess.run(None, step_feeds(names, np.asarray(tok).reshape(b, 1), past_len, past))
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
    target = onnx_cache_dir(cache_dir) / spec.key
    meta = read_entry(target) if target.exists() else None
    if meta is not None and (meta.get("verification") or not verify):
        _raise_if_failed(meta)
        return ExportResult(target / MODEL_FILE, meta, True, float(meta.get("export_seconds", 0.0)))
    t0 = time.perf_counter()
    tmp = new_tmp(target)
    try:
        model = load_torch_model(spec.model_dir, spec.dtype, spec.attn_implementation)
        layers, kv_heads, head_dim = kv_geometry(model.config)
        torch_export(model, tmp / MODEL_FILE, spec.dtype, spec.opset)
        _consolidate(tmp)
        export_s = time.perf_counter() - t0
        import onnx

        onnx.checker.check_model(str(tmp / MODEL_FILE))
        problems = static_dim_problems(tmp / MODEL_FILE)
        if problems:
            raise ExportError(f"exported graph has static dimensions that must be dynamic: {', '.join(problems)}")
        import torch
        import transformers

        meta = {"kind": "export", "model_dir": str(spec.model_dir), "digest": spec.digest, "dtype": spec.dtype,
                "opset": spec.opset, "attn_implementation": spec.attn_implementation,
                "exporter_version": spec.exporter_version, "torch": torch.__version__,
                "transformers": transformers.__version__, "export_version": EXPORT_VERSION,
                "geometry": {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim,
                             "vocab": int(model.config.get_text_config(decoder=True).vocab_size)},
                "export_seconds": round(export_s, 3)}
        if verify:
            v0 = time.perf_counter()
            meta["verification"] = verify_parity(model, tmp / MODEL_FILE, meta)
            meta["verification"]["seconds"] = round(time.perf_counter() - v0, 3)
        del model
        write_entry(tmp, target, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _raise_if_failed(meta)
    return ExportResult(target / MODEL_FILE, meta, False, time.perf_counter() - t0)


def _raise_if_failed(meta: dict[str, Any]) -> None:
    v = meta.get("verification")
    if v and not v.get("ok"):
        raise ExportError("ONNX export disagrees with torch at " + "; ".join(v.get("failures", [])))
