"""Operator registry: what LLM inference runs, each with a float64 reference and per-backend implementations.

An :class:`Op` knows how to

* ``make_inputs(shape, dtype, seed)``: numpy inputs, float ones already rounded to ``dtype`` (held as float64);
* ``reference(inputs, shape)``: a :class:`Ref` (float64 output, error magnitude ``mag``, reduction length ``k``,
  extra absolute tolerance for quantized ops);
* ``torch(inputs, shape)``: the eager implementation (also what ``torch.compile`` compiles), on torch tensors
  already in the cell's dtype and on its device;
* ``onnx(shape, dtype)``: a single-op ONNX graph (``onnx.helper``) and ``onnx_feeds(inputs, shape, dtype)``;
  ``onnx_post(outputs, shape)`` maps ORT outputs back to the reference layout.

Shapes come from :mod:`perfsuite.ops.shapes`. Tolerances from :mod:`perfsuite.ops.tolerance`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfsuite.ops.shapes import Shape
from perfsuite.ops.tolerance import Comparison, compare, tolerance

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
ORT_DTYPES = ("float32", "float16")  # numpy (and so ORT's Python feeds) has no bfloat16


@dataclass
class Ref:
    out: np.ndarray | tuple[np.ndarray, ...]
    mag: np.ndarray | float | None = None
    k: int = 1
    extra: np.ndarray | float = 0.0  # added to the tolerance (quantization error bounds)


@dataclass
class Op:
    name: str
    doc: str
    make_inputs: Callable[[Shape, str, int], dict[str, np.ndarray]]
    reference: Callable[[dict[str, np.ndarray], Shape], Ref]
    torch: Callable[[dict[str, Any], Shape], Any]
    onnx: Callable[[Shape, str], Any] | None = None  # -> onnx.ModelProto
    onnx_feeds: Callable[[dict[str, np.ndarray], Shape, str], dict[str, np.ndarray]] | None = None
    onnx_post: Callable[[list[np.ndarray], Shape], Any] = lambda outs, s: outs[0]
    onnx_key: Callable[[Shape], tuple] = lambda s: ()  # static attributes that need a new graph
    c: float = 8.0  # tolerance constant
    compare: Callable[[Op, Any, Ref, str, dict[str, np.ndarray]], Comparison] | None = None
    sdpa: bool = False  # a torch SDPA call: the kernel family is checked with the profiler
    risky: bool = False  # run in a subprocess when isolation is "risky"
    int_inputs: frozenset[str] = frozenset()  # inputs never cast to the float dtype
    keep_dtype: frozenset[str] = frozenset()  # float inputs kept float32 (e.g. quantization scales on ORT)
    hidden: bool = False  # test-only ops, not in the matrix
    torch_compiled: Callable[[dict[str, Any], Shape], Any] | None = None  # what torch.compile compiles if not .torch
    tags: tuple[str, ...] = field(default_factory=tuple)

    def check(self, out: Any, ref: Ref, dtype: str, inputs: dict[str, np.ndarray]) -> Comparison:
        if self.compare is not None:
            return self.compare(self, out, ref, dtype, inputs)
        tol = tolerance(dtype, np.asarray(ref.out), ref.mag, ref.k, self.c) + ref.extra
        return compare(np.asarray(out), np.asarray(ref.out), tol)


# --------------------------------------------------------------------------------------------- helpers

def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to ``dtype`` and return them as float64 (the reference sees the rounded inputs)."""
    if dtype == "float64":
        return x.astype(np.float64)
    if dtype in ("float32", "float16"):
        return x.astype(dtype).astype(np.float64)
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).to(torch.float64).numpy()


def rng_for(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _np_softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def _onnx_type(dtype: str) -> int:
    from onnx import TensorProto

    return {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
            "int64": TensorProto.INT64, "int32": TensorProto.INT32, "int8": TensorProto.INT8,
            "uint8": TensorProto.UINT8}[dtype]


def _model(nodes: list[Any], inputs: list[tuple[str, str, list[Any]]], outputs: list[tuple[str, str, list[Any]]],
           opset: int = 17, ms: bool = False, initializers: list[Any] | None = None) -> Any:
    from onnx import helper

    g = helper.make_graph(nodes, "op",
                          [helper.make_tensor_value_info(n, _onnx_type(t), s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, _onnx_type(t), s) for n, t, s in outputs],
                          initializer=initializers or [])
    imports = [helper.make_opsetid("", opset)]
    if ms:
        imports.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(g, opset_imports=imports)
    m.ir_version = 9
    return m


def _feed(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(x.astype(dtype))


def _tt(torch_mod: Any, x: Any) -> Any:
    return x


# --------------------------------------------------------------------------------------------- linear / lm_head

def _linear_inputs(n_of: Callable[[Shape], int]) -> Callable[[Shape, str, int], dict[str, np.ndarray]]:
    def make(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        r = rng_for(seed)
        n = n_of(s)
        return {"x": round_to(r.standard_normal((s.batch, s.new, s.hidden)), dtype),
                "w": round_to(r.standard_normal((s.hidden, n)) / math.sqrt(s.hidden), dtype)}
    return make


def _linear_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    return Ref(i["x"] @ i["w"], np.abs(i["x"]) @ np.abs(i["w"]), k=i["x"].shape[-1])


def _linear_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                  [("x", dtype, ["b", "s", "k"]), ("w", dtype, ["k", "n"])], [("y", dtype, ["b", "s", "n"])])


def _plain_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    """Float inputs in the cell's dtype; integer inputs (ids, positions) as they are."""
    return {k: _feed(v, dtype) if np.issubdtype(v.dtype, np.floating) else v for k, v in i.items()}


# --------------------------------------------------------------------------------------------- embedding

def _emb_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    return {"table": round_to(r.standard_normal((s.vocab, s.hidden)), dtype),
            "ids": r.integers(0, s.vocab, (s.batch, s.new), dtype=np.int64)}


def _emb_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    return _model([helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
                  [("table", dtype, ["v", "h"]), ("ids", "int64", ["b", "s"])], [("y", dtype, ["b", "s", "h"])])


# --------------------------------------------------------------------------------------------- norms

RMS_EPS = 1e-6


def _norm_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    return {"x": round_to(r.standard_normal((s.batch, s.new, s.hidden)) * 2 + 0.5, dtype),
            "w": round_to(1 + 0.1 * r.standard_normal(s.hidden), dtype),
            "b": round_to(0.1 * r.standard_normal(s.hidden), dtype)}


def _rms_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    x = i["x"]
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS) * i["w"]
    return Ref(y, np.abs(y), k=x.shape[-1])


def _rms_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    return torch.nn.functional.rms_norm(t["x"], (t["x"].shape[-1],), t["w"], RMS_EPS)


def _rms_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    node = helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=RMS_EPS,
                            stash_type=1)
    return _model([node], [("x", dtype, ["b", "s", "h"]), ("w", dtype, ["h"])], [("y", dtype, ["b", "s", "h"])])


def _ln_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    x = i["x"]
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + 1e-5) * i["w"] + i["b"]
    return Ref(y, np.abs(y) + np.abs(i["b"]), k=x.shape[-1])


def _ln_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    return torch.nn.functional.layer_norm(t["x"], (t["x"].shape[-1],), t["w"], t["b"], 1e-5)


def _ln_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    node = helper.make_node("LayerNormalization", ["x", "w", "b"], ["y"], axis=-1, epsilon=1e-5)
    return _model([node], [("x", dtype, ["b", "s", "h"]), ("w", dtype, ["h"]), ("b", dtype, ["h"])],
                  [("y", dtype, ["b", "s", "h"])])


# --------------------------------------------------------------------------------------------- rotary

ROPE_THETA = 10000.0


def _rope_cache(n_pos: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / ROPE_THETA ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang), np.sin(ang)  # [n_pos, head_dim/2]


def _rope_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    cos, sin = _rope_cache(s.total, s.head_dim)
    pos = np.broadcast_to(np.arange(s.past, s.total, dtype=np.int64), (s.batch, s.new)).copy()
    return {"x": round_to(r.standard_normal((s.batch, s.heads, s.new, s.head_dim)), dtype),
            "cos": round_to(cos, dtype), "sin": round_to(sin, dtype), "pos": pos}


def _rope_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    x, pos = i["x"], i["pos"]
    cos = np.concatenate([i["cos"], i["cos"]], -1)[pos][:, None]  # [b, 1, s, d]
    sin = np.concatenate([i["sin"], i["sin"]], -1)[pos][:, None]
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    y = x * cos + rot * sin
    return Ref(y, np.abs(x) * 2, k=2)


def _rope_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    x, pos = t["x"], t["pos"]
    cos = torch.cat([t["cos"], t["cos"]], -1)[pos].unsqueeze(1)
    sin = torch.cat([t["sin"], t["sin"]], -1)[pos].unsqueeze(1)
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def _rope_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft",
                            interleaved=0)
    return _model([node], [("x", dtype, ["b", "n", "s", "d"]), ("pos", "int64", ["b", "s"]),
                           ("cos", dtype, ["p", "d2"]), ("sin", dtype, ["p", "d2"])],
                  [("y", dtype, ["b", "n", "s", "d"])], ms=True)


def _rope_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    return {"x": _feed(i["x"], dtype), "pos": i["pos"], "cos": _feed(i["cos"], dtype), "sin": _feed(i["sin"], dtype)}


# --------------------------------------------------------------------------------------------- softmax

def _lower_right(new: int, total: int) -> np.ndarray:
    """Boolean [new, total] mask, True = may attend (query i sits at position total - new + i)."""
    return np.tril(np.ones((new, total), dtype=bool), k=total - new)


def _softmax_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    mask = np.where(_lower_right(s.new, s.total), 0.0, -np.inf)
    return {"x": round_to(r.standard_normal((s.batch, s.heads, s.new, s.total)) * 3, dtype), "mask": mask}


def _softmax_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    x = i["x"]
    y = _np_softmax(x + i["mask"])
    return Ref(y, y * np.maximum(1.0, np.abs(x)), k=x.shape[-1])


def _softmax_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    return torch.softmax(t["x"] + t["mask"], dim=-1)


def _softmax_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    return _model([helper.make_node("Add", ["x", "mask"], ["z"]), helper.make_node("Softmax", ["z"], ["y"], axis=-1)],
                  [("x", dtype, ["b", "n", "s", "t"]), ("mask", dtype, ["s", "t"])], [("y", dtype, ["b", "n", "s", "t"])])


# --------------------------------------------------------------------------------------------- attention

def _attn_inputs(prefill: bool) -> Callable[[Shape, str, int], dict[str, np.ndarray]]:
    def make(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        r = rng_for(seed)
        total = s.new if prefill else s.total
        return {"q": round_to(r.standard_normal((s.batch, s.heads, s.new, s.head_dim)), dtype),
                "k": round_to(r.standard_normal((s.batch, s.kv_heads, total, s.head_dim)), dtype),
                "v": round_to(r.standard_normal((s.batch, s.kv_heads, total, s.head_dim)), dtype)}
    return make


def _attn_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    q, k, v = i["q"], i["k"], i["v"]
    ratio = q.shape[1] // k.shape[1]
    k = np.repeat(k, ratio, axis=1)
    v = np.repeat(v, ratio, axis=1)
    new, total, d = q.shape[2], k.shape[2], q.shape[3]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    scores = np.where(_lower_right(new, total), scores, -np.inf)
    p = _np_softmax(scores)
    out = p @ v
    mag = np.abs(p) @ np.abs(v) * np.maximum(1.0, np.abs(scores).max(-1, initial=0, where=np.isfinite(scores),
                                                                        keepdims=True))
    return Ref(out, mag, k=total + d)


def _sdpa_causal_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    q, k, v = t["q"], t["k"], t["v"]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=bool(s.ratio != 1))


def _sdpa_kv_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = t["q"], t["k"], t["v"]
    mask = causal_lower_right(q.shape[2], k.shape[2])
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=bool(s.ratio != 1))


def _sdpa_kv_torch_compiled(t: dict[str, Any], s: Shape) -> Any:
    """Under torch.compile: an explicit boolean lower-right mask (what HF builds), because dynamo cannot trace the
    construction of the ``CausalBias`` tensor subclass (``fullgraph=True`` raises "Calling subclass default
    constructor with more than tensor argument")."""
    import torch

    q, k, v = t["q"], t["k"], t["v"]
    new, total = q.shape[2], k.shape[2]
    mask = torch.ones(new, total, dtype=torch.bool, device=q.device).tril(diagonal=total - new)
    # enable_gqa is a constant here: under dynamic=True an int-derived flag is a SymBool, which SDPA rejects
    # ("argument 'enable_gqa' must be bool, not SymBool"); True is also right for ratio 1.
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def _sdpa_causal_torch_compiled(t: dict[str, Any], s: Shape) -> Any:
    import torch

    return torch.nn.functional.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True, enable_gqa=True)


def _silu_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    return torch.nn.functional.silu(t["x"])


def _gelu_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    return torch.nn.functional.gelu(t["x"])


def _gqa_onnx(prefill: bool) -> Callable[[Shape, str], Any]:
    """com.microsoft GroupQueryAttention (what ORT GenAI / optimum emit; ROCm/CUDA/CPU EPs implement it)."""
    def build(s: Shape, dtype: str) -> Any:
        from onnx import helper

        ins = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
        node = helper.make_node("GroupQueryAttention", ins, ["y", "present_key", "present_value"],
                                domain="com.microsoft", num_heads=s.heads, kv_num_heads=s.kv_heads,
                                scale=1.0 / math.sqrt(s.head_dim))
        return _model([node], [("query", dtype, ["b", "s", s.heads * s.head_dim]),
                               ("key", dtype, ["b", "s", s.kv_heads * s.head_dim]),
                               ("value", dtype, ["b", "s", s.kv_heads * s.head_dim]),
                               ("past_key", dtype, ["b", s.kv_heads, "p", s.head_dim]),
                               ("past_value", dtype, ["b", s.kv_heads, "p", s.head_dim]),
                               ("seqlens_k", "int32", ["b"]), ("total_sequence_length", "int32", [])],
                      [("y", dtype, ["b", "s", s.heads * s.head_dim]),
                       ("present_key", dtype, ["b", s.kv_heads, "t", s.head_dim]),
                       ("present_value", dtype, ["b", s.kv_heads, "t", s.head_dim])], ms=True)
    return build


def _gqa_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    q, k, v = i["q"], i["k"], i["v"]
    b, _, new, _ = q.shape
    total = k.shape[2]
    past = total - new

    def flat(x: np.ndarray) -> np.ndarray:  # [b, h, s, d] -> [b, s, h*d]
        return _feed(np.swapaxes(x, 1, 2).reshape(b, x.shape[2], -1), dtype)

    return {"query": flat(q), "key": flat(k[:, :, past:]), "value": flat(v[:, :, past:]),
            "past_key": _feed(k[:, :, :past], dtype), "past_value": _feed(v[:, :, :past], dtype),
            "seqlens_k": np.full((b,), total - 1, dtype=np.int32),
            "total_sequence_length": np.array(total, dtype=np.int32)}


def _gqa_post(outs: list[np.ndarray], s: Shape) -> np.ndarray:
    y = outs[0]
    b, new = y.shape[0], y.shape[1]
    return np.swapaxes(y.reshape(b, new, s.heads, s.head_dim), 1, 2)


# --------------------------------------------------------------------------------------------- activations

def _act_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    return {"x": round_to(r.standard_normal((s.batch, s.new, s.inter)) * 3, dtype)}


def _silu_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    x = i["x"]
    y = x / (1 + np.exp(-x))
    return Ref(y, np.abs(y) + np.abs(x) * 0.25, k=1)


def _gelu_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    from scipy.special import erf

    x = i["x"]
    y = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    return Ref(y, np.abs(y) + np.abs(x) * 0.5, k=1)


def _silu_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    return _model([helper.make_node("Sigmoid", ["x"], ["sg"]), helper.make_node("Mul", ["x", "sg"], ["y"])],
                  [("x", dtype, ["b", "s", "h"])], [("y", dtype, ["b", "s", "h"])])


def _gelu_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    return _model([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")],
                  [("x", dtype, ["b", "s", "h"])], [("y", dtype, ["b", "s", "h"])], ms=True)


# --------------------------------------------------------------------------------------------- argmax / top-k

def _logits_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    return {"x": round_to(r.standard_normal((s.batch, s.vocab)) * 4, dtype)}


def _argmax_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    return Ref(i["x"].max(-1))


def _argmax_compare(op: Op, out: Any, ref: Ref, dtype: str, inputs: dict[str, np.ndarray]) -> Comparison:
    idx = np.asarray(out).astype(np.int64)
    x = inputs["x"]
    if idx.shape != x.shape[:1] or (idx.size and (idx.min() < 0 or idx.max() >= x.shape[-1])):
        return Comparison(False, math.inf, math.inf, 0, int(x.shape[0]), int(x.shape[0]))
    picked = np.take_along_axis(x, idx[:, None], -1)[:, 0]
    return compare(picked, np.asarray(ref.out), np.zeros(picked.shape) + 1e-300)  # exact: same rounded values


def _topk_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    k = min(s.topk, i["x"].shape[-1])
    return Ref(-np.sort(-i["x"], axis=-1)[:, :k])


def _topk_compare(op: Op, out: Any, ref: Ref, dtype: str, inputs: dict[str, np.ndarray]) -> Comparison:
    vals, idx = out
    vals, idx = np.asarray(vals, dtype=np.float64), np.asarray(idx).astype(np.int64)
    want = np.asarray(ref.out)
    x = inputs["x"]
    if idx.shape != want.shape or vals.shape != want.shape or (idx.size and (idx.min() < 0 or idx.max() >= x.shape[-1])):
        return Comparison(False, math.inf, math.inf, 0, int(want.size), int(want.size))
    picked = np.take_along_axis(x, idx, -1)
    both = np.stack([vals, picked])  # values sorted like the reference, and the indices point at them
    return compare(both, np.stack([want, want]), np.zeros(both.shape) + 1e-300)


def _topk_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    r = torch.topk(t["x"], min(s.topk, t["x"].shape[-1]), dim=-1)
    return r.values, r.indices


def _topk_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    return _model([helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1, largest=1, sorted=1)],
                  [("x", dtype, ["b", "v"]), ("k", "int64", [1])],
                  [("values", dtype, ["b", "kk"]), ("indices", "int64", ["b", "kk"])])


def _topk_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    return {"x": _feed(i["x"], dtype), "k": np.array([min(s.topk, i["x"].shape[-1])], dtype=np.int64)}


def _argmax_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    return _model([helper.make_node("ArgMax", ["x"], ["y"], axis=-1, keepdims=0)],
                  [("x", dtype, ["b", "v"])], [("y", "int64", ["b"])])


# --------------------------------------------------------------------------------------------- int8 dynamic quant

def _q8_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    """Weights int8 symmetric per output column; activations are quantized by the backend at run time."""
    r = rng_for(seed)
    w = r.standard_normal((s.hidden, s.inter)) / math.sqrt(s.hidden)
    scale = np.abs(w).max(0) / 127.0
    scale = np.where(scale > 0, scale, 1.0)
    wq = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    return {"x": round_to(r.standard_normal((s.batch, s.new, s.hidden)), dtype), "wq": wq,
            "scale": round_to(scale, "float32")}


def _q8_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    """Reference: x @ dequant(W) in float64. Tolerance adds the activation-quantization bound
    ``step(x) * sum_k |W[k, n]|`` where ``step`` is the per-tensor int8 symmetric step ``max|x| / 127`` (>= the
    per-tensor asymmetric uint8 step ORT uses, and >= any per-token step): a rounding-correct kernel is within half
    of that; a wrong scale/zero-point/layout is far outside."""
    x = i["x"]
    wd = i["wq"].astype(np.float64) * i["scale"]
    step = np.abs(x).max() / 127.0
    extra = step * np.abs(wd).sum(0)
    return Ref(x @ wd, np.abs(x) @ np.abs(wd), k=x.shape[-1], extra=extra)


def _q8_torch(t: dict[str, Any], s: Shape) -> Any:
    """W8A8: per-token symmetric int8 activations, ``torch._int_mm`` (int8 x int8 -> int32), then scale."""
    import torch

    x = t["x"]
    b, n, k = x.shape
    x2 = x.reshape(b * n, k).float()
    sx = x2.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127.0
    xq = torch.clamp(torch.round(x2 / sx), -127, 127).to(torch.int8)
    acc = torch._int_mm(xq, t["wq"])
    y = acc.float() * sx * t["scale"].float()
    return y.to(x.dtype).reshape(b, n, -1)


def _q8_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    node = helper.make_node("DynamicQuantizeMatMul", ["x", "wq", "scale"], ["y"], domain="com.microsoft")
    return _model([node], [("x", dtype, ["b", "s", "k"]), ("wq", "int8", ["k", "n"]), ("scale", dtype, ["n"])],
                  [("y", dtype, ["b", "s", "n"])], ms=True)


def _q8_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    return {"x": _feed(i["x"], dtype), "wq": i["wq"], "scale": _feed(i["scale"], dtype)}


# --------------------------------------------------------------------------------------------- int4 group-wise (AWQ)

def _q4_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    """AWQ-style: uint4 weights [K, N], per (group of ``s.group`` rows along K, column) scale and uint4 zero point."""
    r = rng_for(seed)
    k, n, g = s.hidden, s.inter, s.group
    groups = -(-k // g)
    return {"x": round_to(r.standard_normal((s.batch, s.new, k)), dtype),
            "q": r.integers(0, 16, (k, n), dtype=np.uint8),
            "zeros": r.integers(4, 12, (groups, n), dtype=np.uint8),
            "scales": round_to(r.uniform(0.5, 1.5, (groups, n)) / (4 * math.sqrt(k)), dtype)}


def _q4_dequant(i: dict[str, np.ndarray], g: int) -> np.ndarray:
    k = i["q"].shape[0]
    z = np.repeat(i["zeros"].astype(np.float64), g, 0)[:k]
    sc = np.repeat(i["scales"], g, 0)[:k]
    return (i["q"].astype(np.float64) - z) * sc


def _q4_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    wd = _q4_dequant(i, s.group)
    x = i["x"]
    return Ref(x @ wd, np.abs(x) @ np.abs(wd), k=x.shape[-1])


def _q4_torch(t: dict[str, Any], s: Shape) -> Any:
    """The dequantize-then-matmul fallback path (what an AWQ model runs without a fused int4 kernel)."""
    x = t["x"]
    k = t["q"].shape[0]
    g = s.group
    z = t["zeros"].to(x.dtype).repeat_interleave(g, 0)[:k]
    sc = t["scales"].repeat_interleave(g, 0)[:k]
    w = (t["q"].to(x.dtype) - z) * sc
    return x @ w


def _q4_onnx(s: Shape, dtype: str) -> Any:
    from onnx import helper

    node = helper.make_node("MatMulNBits", ["x", "b", "scales", "zp"], ["y"], domain="com.microsoft",
                            K=s.hidden, N=s.inter, bits=4, block_size=s.group)
    groups = -(-s.hidden // s.group)
    return _model([node], [("x", dtype, ["b", "s", s.hidden]), ("b", "uint8", [s.inter, groups, s.group // 2]),
                           ("scales", dtype, [s.inter * groups]), ("zp", "uint8", [s.inter * ((groups + 1) // 2)])],
                  [("y", dtype, ["b", "s", s.inter])], ms=True)


def pack_matmulnbits(q: np.ndarray, zeros: np.ndarray, scales: np.ndarray, g: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AWQ-layout uint4 [K, N] / [groups, N] -> MatMulNBits B [N, groups, g/2], zero points, scales [N*groups]."""
    k, n = q.shape
    groups = -(-k // g)
    pad = np.zeros((groups * g, n), dtype=np.uint8)
    pad[:k] = q
    qt = pad.T.reshape(n, groups, g)  # [N, groups, g]
    b = (qt[..., 0::2] | (qt[..., 1::2] << 4)).astype(np.uint8)
    zt = zeros.T  # [N, groups]
    zpad = np.zeros((n, 2 * ((groups + 1) // 2)), dtype=np.uint8)
    zpad[:, :groups] = zt
    zp = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    return b, zp, scales.T.reshape(-1)


def _q4_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    b, zp, sc = pack_matmulnbits(i["q"], i["zeros"], i["scales"], s.group)
    return {"x": _feed(i["x"], dtype), "b": b, "scales": _feed(sc, dtype), "zp": zp}


# --------------------------------------------------------------------------------------------- test-only

def _abort_torch(t: dict[str, Any], s: Shape) -> Any:
    import os

    os.abort()  # simulates a device fault (the process dies) for the subprocess-runner tests


def _identity_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    return Ref(i["x"])


def _nan_torch(t: dict[str, Any], s: Shape) -> Any:
    y = t["x"].clone()
    y.view(-1)[0] = float("nan")
    return y


# --------------------------------------------------------------------------------------------- the registry

def _ident_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    return {"x": round_to(rng_for(seed).standard_normal((s.batch, s.new, 8)), dtype)}


OPS: dict[str, Op] = {op.name: op for op in (
    Op("linear", "x[b,s,hidden] @ W[hidden,inter] (MLP projection; decode M = batch)",
       _linear_inputs(lambda s: s.inter), _linear_ref, lambda t, s: t["x"] @ t["w"], _linear_onnx, _plain_feeds),
    Op("lm_head", "x[b,s,hidden] @ W[hidden,vocab] (vocab-sized N)",
       _linear_inputs(lambda s: s.vocab), _linear_ref, lambda t, s: t["x"] @ t["w"], _linear_onnx, _plain_feeds),
    Op("embedding", "table[vocab,hidden][ids[b,s]] (ONNX Gather)", _emb_inputs,
       lambda i, s: Ref(i["table"][i["ids"]]), lambda t, s: t["table"][t["ids"]], _emb_onnx, _plain_feeds,
       c=1.0, int_inputs=frozenset({"ids"})),
    Op("rmsnorm", "x / sqrt(mean(x^2) + 1e-6) * w (ORT SimplifiedLayerNormalization)", _norm_inputs, _rms_ref,
       _rms_torch, _rms_onnx, lambda i, s, d: {"x": _feed(i["x"], d), "w": _feed(i["w"], d)}),
    Op("layernorm", "LayerNorm(eps=1e-5) with weight and bias (ONNX LayerNormalization)", _norm_inputs, _ln_ref,
       _ln_torch, _ln_onnx, _plain_feeds),
    Op("rotary", "rotate-half RoPE at positions past..past+new-1 (ORT com.microsoft RotaryEmbedding)",
       _rope_inputs, _rope_ref, _rope_torch, _rope_onnx, _rope_feeds, int_inputs=frozenset({"pos"})),
    Op("softmax", "softmax(x + mask) with a lower-right causal -inf mask over past+new keys",
       _softmax_inputs, _softmax_ref, _softmax_torch, _softmax_onnx, _plain_feeds, c=16.0),
    Op("sdpa_causal", "causal prefill attention, GQA (torch SDPA is_causal; ORT GroupQueryAttention)",
       _attn_inputs(True), _attn_ref, _sdpa_causal_torch, _gqa_onnx(True), _gqa_feeds, _gqa_post,
       onnx_key=lambda s: (s.heads, s.kv_heads, s.head_dim), c=16.0, sdpa=True, risky=True,
       torch_compiled=_sdpa_causal_torch_compiled),
    Op("sdpa_kvcache", "new tokens over a KV cache, lower-right causal mask, GQA (torch SDPA causal_lower_right; "
       "ORT GroupQueryAttention with past)", _attn_inputs(False), _attn_ref, _sdpa_kv_torch, _gqa_onnx(False),
       _gqa_feeds, _gqa_post, onnx_key=lambda s: (s.heads, s.kv_heads, s.head_dim), c=16.0, sdpa=True, risky=True,
       torch_compiled=_sdpa_kv_torch_compiled),
    Op("silu", "x * sigmoid(x)", _act_inputs, _silu_ref, _silu_torch,
       _silu_onnx, _plain_feeds),
    Op("gelu", "exact (erf) GELU (ORT com.microsoft Gelu)", _act_inputs, _gelu_ref,
       _gelu_torch, _gelu_onnx, _plain_feeds, c=16.0),
    Op("argmax", "greedy token: argmax over the vocab", _logits_inputs, _argmax_ref, lambda t, s: t["x"].argmax(-1),
       _argmax_onnx, _plain_feeds, compare=_argmax_compare),
    Op("topk", "top-k over the vocab (values sorted, indices point at them)", _logits_inputs, _topk_ref,
       _topk_torch, _topk_onnx, _topk_feeds, onnx_post=lambda outs, s: (outs[0], outs[1]), compare=_topk_compare),
    Op("int8_dynamic_matmul", "W8A8 dynamic: int8 per-column weights, activations quantized at run time "
       "(torch._int_mm; ORT DynamicQuantizeMatMul)", _q8_inputs, _q8_ref, _q8_torch, _q8_onnx, _q8_feeds,
       int_inputs=frozenset({"wq"}), keep_dtype=frozenset({"scale"}), risky=True),
    Op("int4_awq_matmul", "AWQ-style uint4 group-wise weights with zero points (torch dequant+matmul; ORT "
       "MatMulNBits)", _q4_inputs, _q4_ref, _q4_torch, _q4_onnx, _q4_feeds,
       onnx_key=lambda s: (s.hidden, s.inter, s.group), int_inputs=frozenset({"q", "zeros"}), risky=True),
    Op("_abort", "test-only: the process dies", _ident_inputs, _identity_ref, _abort_torch, hidden=True),
    Op("_nan", "test-only: one NaN", _ident_inputs, _identity_ref, _nan_torch, hidden=True),
)}


def public_ops() -> list[str]:
    return [n for n, op in OPS.items() if not op.hidden]


def get(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known: {', '.join(public_ops())}") from None
