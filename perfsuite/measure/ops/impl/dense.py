"""Matrix products, embedding lookup, norms and rotary embedding."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from perfsuite.measure.ops.impl.base import Op, Ref, feed, node, onnx_model, plain_feeds, rng_for, round_to
from perfsuite.measure.ops.shapes import Shape

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
    return onnx_model([node("MatMul", ["x", "w"], ["y"])],
                      [("x", dtype, ["b", "s", "k"]), ("w", dtype, ["k", "n"])], [("y", dtype, ["b", "s", "n"])])


# --------------------------------------------------------------------------------------------- embedding

def _emb_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    return {"table": round_to(r.standard_normal((s.vocab, s.hidden)), dtype),
            "ids": r.integers(0, s.vocab, (s.batch, s.new), dtype=np.int64)}


def _emb_onnx(s: Shape, dtype: str) -> Any:
    return onnx_model([node("Gather", ["table", "ids"], ["y"], axis=0)],
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
    rms = node("SimplifiedLayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=RMS_EPS, stash_type=1)
    return onnx_model([rms], [("x", dtype, ["b", "s", "h"]), ("w", dtype, ["h"])], [("y", dtype, ["b", "s", "h"])])


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
    ln = node("LayerNormalization", ["x", "w", "b"], ["y"], axis=-1, epsilon=1e-5)
    return onnx_model([ln], [("x", dtype, ["b", "s", "h"]), ("w", dtype, ["h"]), ("b", dtype, ["h"])],
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
    rope = node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft", interleaved=0)
    return onnx_model([rope], [("x", dtype, ["b", "n", "s", "d"]), ("pos", "int64", ["b", "s"]),
                               ("cos", dtype, ["p", "d2"]), ("sin", dtype, ["p", "d2"])],
                      [("y", dtype, ["b", "n", "s", "d"])], ms=True)


OPS: tuple[Op, ...] = (
    Op("linear", "x[b,s,hidden] @ W[hidden,inter] (MLP projection; decode M = batch)",
       _linear_inputs(lambda s: s.inter), _linear_ref, lambda t, s: t["x"] @ t["w"], _linear_onnx, plain_feeds),
    Op("lm_head", "x[b,s,hidden] @ W[hidden,vocab] (vocab-sized N)",
       _linear_inputs(lambda s: s.vocab), _linear_ref, lambda t, s: t["x"] @ t["w"], _linear_onnx, plain_feeds),
    Op("embedding", "table[vocab,hidden][ids[b,s]] (ONNX Gather)", _emb_inputs,
       lambda i, s: Ref(i["table"][i["ids"]]), lambda t, s: t["table"][t["ids"]], _emb_onnx, plain_feeds,
       c=1.0, int_inputs=frozenset({"ids"})),
    Op("rmsnorm", "x / sqrt(mean(x^2) + 1e-6) * w (ORT SimplifiedLayerNormalization)", _norm_inputs, _rms_ref,
       _rms_torch, _rms_onnx, lambda i, s, d: {"x": feed(i["x"], d), "w": feed(i["w"], d)}),
    Op("layernorm", "LayerNorm(eps=1e-5) with weight and bias (ONNX LayerNormalization)", _norm_inputs, _ln_ref,
       _ln_torch, _ln_onnx, plain_feeds),
    Op("rotary", "rotate-half RoPE at positions past..past+new-1 (ORT com.microsoft RotaryEmbedding)",
       _rope_inputs, _rope_ref, _rope_torch, _rope_onnx, plain_feeds, int_inputs=frozenset({"pos"})),
)
