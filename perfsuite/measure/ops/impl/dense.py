"""Matrix products, embedding lookup, norms and rotary embedding."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from perfsuite.measure.ops.impl.base import Inputs, Op, Ref, feed, graph, nnf, plain_feeds, rng_for, round_to
from perfsuite.measure.ops.shapes import Shape

# --------------------------------------------------------------------------------------------- linear / lm_head

def _linear_inputs(n_of: Callable[[Shape], int]) -> Inputs:
    def make(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        r = rng_for(seed)
        n = n_of(s)
        return {"x": round_to(r.standard_normal((s.batch, s.new, s.hidden)), dtype),
                "w": round_to(r.standard_normal((s.hidden, n)) / math.sqrt(s.hidden), dtype)}
    return make


def _linear_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    return Ref(i["x"] @ i["w"], np.abs(i["x"]) @ np.abs(i["w"]), k=i["x"].shape[-1])


_linear_onnx = graph("MatMul", "x[b,s,k] w[k,n]", "y[b,s,n]")


# --------------------------------------------------------------------------------------------- embedding

def _emb_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    return {"table": round_to(r.standard_normal((s.vocab, s.hidden)), dtype),
            "ids": r.integers(0, s.vocab, (s.batch, s.new), dtype=np.int64)}


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


def _ln_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    x = i["x"]
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + 1e-5) * i["w"] + i["b"]
    return Ref(y, np.abs(y) + np.abs(i["b"]), k=x.shape[-1])


# --------------------------------------------------------------------------------------------- rotary

ROPE_THETA = 10000.0


def _rope_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    inv = 1.0 / ROPE_THETA ** (np.arange(0, s.head_dim, 2, dtype=np.float64) / s.head_dim)
    ang = np.arange(s.total, dtype=np.float64)[:, None] * inv[None, :]  # [positions, head_dim/2]
    pos = np.broadcast_to(np.arange(s.past, s.total, dtype=np.int64), (s.batch, s.new)).copy()
    return {"x": round_to(r.standard_normal((s.batch, s.heads, s.new, s.head_dim)), dtype),
            "cos": round_to(np.cos(ang), dtype), "sin": round_to(np.sin(ang), dtype), "pos": pos}


def _rotate(x: Any, cos: Any, sin: Any, pos: Any, cat: Callable[..., Any]) -> Any:
    """Rotate-half RoPE at positions ``pos`` [b, s] on numpy (``cat`` np.concatenate) or torch (torch.cat) arrays."""
    cos = cat([cos, cos], -1)[pos][:, None]  # [b, 1, s, d]
    sin = cat([sin, sin], -1)[pos][:, None]
    h = x.shape[-1] // 2
    return x * cos + cat([-x[..., h:], x[..., :h]], -1) * sin


def _rope_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    return Ref(_rotate(i["x"], i["cos"], i["sin"], i["pos"], np.concatenate), np.abs(i["x"]) * 2, k=2)


def _rope_torch(t: dict[str, Any], s: Shape) -> Any:
    import torch

    return _rotate(t["x"], t["cos"], t["sin"], t["pos"], torch.cat)


OPS: tuple[Op, ...] = (
    Op("linear", "x[b,s,hidden] @ W[hidden,inter] (MLP projection; decode M = batch)",
       _linear_inputs(lambda s: s.inter), _linear_ref, lambda t, s: t["x"] @ t["w"], _linear_onnx, plain_feeds),
    Op("lm_head", "x[b,s,hidden] @ W[hidden,vocab] (vocab-sized N)",
       _linear_inputs(lambda s: s.vocab), _linear_ref, lambda t, s: t["x"] @ t["w"], _linear_onnx, plain_feeds),
    Op("embedding", "table[vocab,hidden][ids[b,s]] (ONNX Gather)", _emb_inputs,
       lambda i, s: Ref(i["table"][i["ids"]]), lambda t, s: t["table"][t["ids"]],
       graph("Gather", "table[v,h] ids:int64[b,s]", "y[b,s,h]", axis=0), plain_feeds, c=1.0,
       int_inputs=frozenset({"ids"})),
    Op("rmsnorm", "x / sqrt(mean(x^2) + 1e-6) * w (ORT SimplifiedLayerNormalization)", _norm_inputs, _rms_ref,
       lambda t, s: nnf().rms_norm(t["x"], (t["x"].shape[-1],), t["w"], RMS_EPS),
       graph("SimplifiedLayerNormalization", "x[b,s,h] w[h]", "y[b,s,h]", axis=-1, epsilon=RMS_EPS, stash_type=1),
       lambda i, s, d: {"x": feed(i["x"], d), "w": feed(i["w"], d)}),
    Op("layernorm", "LayerNorm(eps=1e-5) with weight and bias (ONNX LayerNormalization)", _norm_inputs, _ln_ref,
       lambda t, s: nnf().layer_norm(t["x"], (t["x"].shape[-1],), t["w"], t["b"], 1e-5),
       graph("LayerNormalization", "x[b,s,h] w[h] b[h]", "y[b,s,h]", axis=-1, epsilon=1e-5), plain_feeds),
    Op("rotary", "rotate-half RoPE at positions past..past+new-1 (ORT com.microsoft RotaryEmbedding)",
       _rope_inputs, _rope_ref, _rope_torch,
       graph("RotaryEmbedding", "x[b,n,s,d] pos:int64[b,s] cos[p,d2] sin[p,d2]", "y[b,n,s,d]", domain="com.microsoft",
             interleaved=0), plain_feeds, int_inputs=frozenset({"pos"})),
)
