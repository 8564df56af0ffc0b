"""Masked softmax and attention (prefill and over a KV cache, GQA)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from perfsuite.measure.ops.impl.base import Op, Ref, feed, graph, node, onnx_model, plain_feeds, rng_for, round_to
from perfsuite.measure.ops.shapes import Shape

# --------------------------------------------------------------------------------------------- softmax

def _lower_right(new: int, total: int) -> np.ndarray:
    """Boolean [new, total] mask, True = may attend (query i sits at position total - new + i)."""
    return np.tril(np.ones((new, total), dtype=bool), k=total - new)


def _softmax_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    r = rng_for(seed)
    mask = np.where(_lower_right(s.new, s.total), 0.0, -np.inf)
    return {"x": round_to(r.standard_normal((s.batch, s.heads, s.new, s.total)) * 3, dtype), "mask": mask}


def _softmax_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    from scipy.special import softmax

    x = i["x"]
    y = softmax(x + i["mask"], axis=-1)
    return Ref(y, y * np.maximum(1.0, np.abs(x)), k=x.shape[-1])


def _softmax_onnx(s: Shape, dtype: str) -> Any:
    return onnx_model([node("Add", ["x", "mask"], ["z"]), node("Softmax", ["z"], ["y"], axis=-1)],
                      [("x", dtype, ["b", "n", "s", "t"]), ("mask", dtype, ["s", "t"])],
                      [("y", dtype, ["b", "n", "s", "t"])])


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
    from scipy.special import softmax

    q, k, v = i["q"], i["k"], i["v"]
    ratio = q.shape[1] // k.shape[1]
    k = np.repeat(k, ratio, axis=1)
    v = np.repeat(v, ratio, axis=1)
    new, total, d = q.shape[2], k.shape[2], q.shape[3]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    scores = np.where(_lower_right(new, total), scores, -np.inf)
    p = softmax(scores, axis=-1)
    out = p @ v
    mag = np.abs(p) @ np.abs(v) * np.maximum(1.0, np.abs(scores).max(-1, initial=0, where=np.isfinite(scores),
                                                                        keepdims=True))
    return Ref(out, mag, k=total + d)


def _sdpa_torch(kv_cache: bool, compiled: bool = False) -> Callable[[dict[str, Any], Shape], Any]:
    """Torch SDPA, causal (prefill) or with a lower-right causal mask over a KV cache.

    Under torch.compile (``compiled``) the mask is an explicit boolean one (what HF builds), because dynamo cannot
    trace the construction of the ``CausalBias`` tensor subclass (``fullgraph=True`` raises "Calling subclass
    default constructor with more than tensor argument"); and ``enable_gqa`` is a constant: under dynamic=True an
    int-derived flag is a SymBool, which SDPA rejects ("argument 'enable_gqa' must be bool, not SymBool"); True is
    also right for ratio 1."""
    def run(t: dict[str, Any], s: Shape) -> Any:
        import torch

        q, k, v = t["q"], t["k"], t["v"]
        new, total = q.shape[2], k.shape[2]
        mask = None
        if kv_cache and compiled:
            mask = torch.ones(new, total, dtype=torch.bool, device=q.device).tril(diagonal=total - new)
        elif kv_cache:
            from torch.nn.attention.bias import causal_lower_right

            mask = causal_lower_right(new, total)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not kv_cache,
                                                                enable_gqa=compiled or bool(s.ratio != 1))
    return run


def _gqa_onnx(s: Shape, dtype: str) -> Any:
    """com.microsoft GroupQueryAttention (what ORT GenAI / optimum emit; ROCm/CUDA/CPU EPs implement it); the same
    graph serves prefill (empty past) and decode."""
    q, kv, cache = f"b,s,{s.heads * s.head_dim}", f"b,s,{s.kv_heads * s.head_dim}", f"{s.kv_heads},p,{s.head_dim}"
    present = f"b,{s.kv_heads},t,{s.head_dim}"
    return graph("GroupQueryAttention", f"query[{q}] key[{kv}] value[{kv}] past_key[b,{cache}] past_value[b,{cache}] "
                 "seqlens_k:int32[b] total_sequence_length:int32[]",
                 f"y[{q}] present_key[{present}] present_value[{present}]", domain="com.microsoft",
                 num_heads=s.heads, kv_num_heads=s.kv_heads, scale=1.0 / math.sqrt(s.head_dim))(s, dtype)


def _gqa_key(s: Shape) -> tuple[int, int, int]:
    return s.heads, s.kv_heads, s.head_dim


def _gqa_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    q, k, v = i["q"], i["k"], i["v"]
    b, _, new, _ = q.shape
    total = k.shape[2]
    past = total - new

    def flat(x: np.ndarray) -> np.ndarray:  # [b, h, s, d] -> [b, s, h*d]
        return feed(np.swapaxes(x, 1, 2).reshape(b, x.shape[2], -1), dtype)

    return {"query": flat(q), "key": flat(k[:, :, past:]), "value": flat(v[:, :, past:]),
            "past_key": feed(k[:, :, :past], dtype), "past_value": feed(v[:, :, :past], dtype),
            "seqlens_k": np.full((b,), total - 1, dtype=np.int32),
            "total_sequence_length": np.array(total, dtype=np.int32)}


def _gqa_post(outs: list[np.ndarray], s: Shape) -> np.ndarray:
    y = outs[0]
    b, new = y.shape[0], y.shape[1]
    return np.swapaxes(y.reshape(b, new, s.heads, s.head_dim), 1, 2)


OPS: tuple[Op, ...] = (
    Op("softmax", "softmax(x + mask) with a lower-right causal -inf mask over past+new keys", _softmax_inputs,
       _softmax_ref, lambda t, s: (t["x"] + t["mask"]).softmax(-1), _softmax_onnx, plain_feeds, c=16.0),
    Op("sdpa_causal", "causal prefill attention, GQA (torch SDPA is_causal; ORT GroupQueryAttention)",
       _attn_inputs(True), _attn_ref, _sdpa_torch(False), _gqa_onnx, _gqa_feeds, _gqa_post, onnx_key=_gqa_key,
       c=16.0, sdpa=True, risky=True, torch_compiled=_sdpa_torch(False, compiled=True)),
    Op("sdpa_kvcache", "new tokens over a KV cache, lower-right causal mask, GQA (torch SDPA causal_lower_right; "
       "ORT GroupQueryAttention with past)", _attn_inputs(False), _attn_ref, _sdpa_torch(True), _gqa_onnx,
       _gqa_feeds, _gqa_post, onnx_key=_gqa_key, c=16.0, sdpa=True, risky=True,
       torch_compiled=_sdpa_torch(True, compiled=True)),
)
