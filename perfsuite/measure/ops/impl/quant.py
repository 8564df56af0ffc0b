"""Quantized matrix products: int8 dynamic (W8A8) and int4 group-wise (AWQ)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from perfsuite.measure.ops.impl.base import Op, Ref, feed, graph, plain_feeds, rng_for, round_to
from perfsuite.measure.ops.shapes import Shape

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


def _q4_dequant(q: Any, zeros: Any, scales: Any, g: int, repeat: Callable[[Any, int], Any]) -> Any:
    """``(q - zero) * scale`` with a zero point and scale per ``g`` rows along K, on numpy or torch arrays (``repeat``
    repeats each row ``g`` times)."""
    return (q - repeat(zeros, g)[:len(q)]) * repeat(scales, g)[:len(q)]


def _q4_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    wd = _q4_dequant(i["q"].astype(np.float64), i["zeros"].astype(np.float64), i["scales"], s.group,
                     lambda a, g: np.repeat(a, g, 0))
    x = i["x"]
    return Ref(x @ wd, np.abs(x) @ np.abs(wd), k=x.shape[-1])


def _q4_torch(t: dict[str, Any], s: Shape) -> Any:
    """The dequantize-then-matmul fallback path (what an AWQ model runs without a fused int4 kernel)."""
    x = t["x"]
    return x @ _q4_dequant(t["q"].to(x.dtype), t["zeros"].to(x.dtype), t["scales"], s.group,
                           lambda a, g: a.repeat_interleave(g, 0))


def _q4_onnx(s: Shape, dtype: str) -> Any:
    groups = -(-s.hidden // s.group)
    return graph("MatMulNBits", f"x[b,s,{s.hidden}] b:uint8[{s.inter},{groups},{s.group // 2}] "
                 f"scales[{s.inter * groups}] zp:uint8[{s.inter * ((groups + 1) // 2)}]", f"y[b,s,{s.inter}]",
                 domain="com.microsoft", K=s.hidden, N=s.inter, bits=4, block_size=s.group)(s, dtype)


def pack_matmulnbits(q: np.ndarray, zeros: np.ndarray, scales: np.ndarray, g: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AWQ-layout uint4 [K, N] / [groups, N] -> MatMulNBits B [N, groups, g/2], zero points, scales [N*groups]."""
    k, n = q.shape
    groups = -(-k // g)
    pad = np.zeros((groups * g, n), dtype=np.uint8)
    pad[:k] = q
    qt = pad.T.reshape(n, groups, g)  # [N, groups, g]
    b = (qt[..., 0::2] | (qt[..., 1::2] << 4)).astype(np.uint8)
    zpad = np.zeros((n, 2 * ((groups + 1) // 2)), dtype=np.uint8)
    zpad[:, :groups] = zeros.T  # [N, groups]
    zp = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    return b, zp, scales.T.reshape(-1)


def _q4_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    b, zp, sc = pack_matmulnbits(i["q"], i["zeros"], i["scales"], s.group)
    return {"x": feed(i["x"], dtype), "b": b, "scales": feed(sc, dtype), "zp": zp}


OPS: tuple[Op, ...] = (
    Op("int8_dynamic_matmul", "W8A8 dynamic: int8 per-column weights, activations quantized at run time "
       "(torch._int_mm; ORT DynamicQuantizeMatMul)", _q8_inputs, _q8_ref, _q8_torch,
       graph("DynamicQuantizeMatMul", "x[b,s,k] wq:int8[k,n] scale[n]", "y[b,s,n]", domain="com.microsoft"),
       plain_feeds, int_inputs=frozenset({"wq"}), keep_dtype=frozenset({"scale"}), risky=True),
    Op("int4_awq_matmul", "AWQ-style uint4 group-wise weights with zero points (torch dequant+matmul; ORT "
       "MatMulNBits)", _q4_inputs, _q4_ref, _q4_torch, _q4_onnx, _q4_feeds,
       onnx_key=lambda s: (s.hidden, s.inter, s.group), int_inputs=frozenset({"q", "zeros"}), risky=True),
)
