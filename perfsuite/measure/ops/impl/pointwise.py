"""Activations (SiLU, GELU) and greedy/top-k selection over the vocab."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perfsuite.measure.ops.impl.base import Op, Ref, feed, gaussian_x, graph, nnf, node, onnx_model, plain_feeds
from perfsuite.measure.ops.shapes import Shape
from perfsuite.measure.ops.tolerance import ToleranceCheck, compare

# --------------------------------------------------------------------------------------------- activations

_act_inputs = gaussian_x(lambda s: (s.batch, s.new, s.inter), 3)


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
    return onnx_model([node("Sigmoid", ["x"], ["sg"]), node("Mul", ["x", "sg"], ["y"])],
                      [("x", dtype, ["b", "s", "h"])], [("y", dtype, ["b", "s", "h"])])


# --------------------------------------------------------------------------------------------- argmax / top-k

_logits_inputs = gaussian_x(lambda s: (s.batch, s.vocab), 4)


def _argmax_compare(op: Op, out: Any, ref: Ref, dtype: str, inputs: dict[str, np.ndarray]) -> ToleranceCheck:
    idx = np.asarray(out).astype(np.int64)
    x = inputs["x"]
    if idx.shape != x.shape[:1] or (idx.size and (idx.min() < 0 or idx.max() >= x.shape[-1])):
        return ToleranceCheck(False, math.inf, math.inf, 0, int(x.shape[0]), int(x.shape[0]))
    picked = np.take_along_axis(x, idx[:, None], -1)[:, 0]
    return compare(picked, np.asarray(ref.out), np.zeros(picked.shape) + 1e-300)  # exact: same rounded values


def _topk_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    k = min(s.topk, i["x"].shape[-1])
    return Ref(-np.sort(-i["x"], axis=-1)[:, :k])


def _topk_compare(op: Op, out: Any, ref: Ref, dtype: str, inputs: dict[str, np.ndarray]) -> ToleranceCheck:
    vals, idx = out
    vals, idx = np.asarray(vals, dtype=np.float64), np.asarray(idx).astype(np.int64)
    want = np.asarray(ref.out)
    x = inputs["x"]
    if idx.shape != want.shape or vals.shape != want.shape or (idx.size and (idx.min() < 0 or idx.max() >= x.shape[-1])):
        return ToleranceCheck(False, math.inf, math.inf, 0, int(want.size), int(want.size))
    picked = np.take_along_axis(x, idx, -1)
    both = np.stack([vals, picked])  # values sorted like the reference, and the indices point at them
    return compare(both, np.stack([want, want]), np.zeros(both.shape) + 1e-300)


def _topk_torch(t: dict[str, Any], s: Shape) -> Any:
    r = t["x"].topk(min(s.topk, t["x"].shape[-1]), dim=-1)
    return r.values, r.indices


def _topk_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    return {"x": feed(i["x"], dtype), "k": np.array([min(s.topk, i["x"].shape[-1])], dtype=np.int64)}


OPS: tuple[Op, ...] = (
    Op("silu", "x * sigmoid(x)", _act_inputs, _silu_ref, lambda t, s: nnf().silu(t["x"]), _silu_onnx, plain_feeds),
    Op("gelu", "exact (erf) GELU (ORT com.microsoft Gelu)", _act_inputs, _gelu_ref, lambda t, s: nnf().gelu(t["x"]),
       graph("Gelu", "x[b,s,h]", "y[b,s,h]", domain="com.microsoft"), plain_feeds, c=16.0),
    Op("argmax", "greedy token: argmax over the vocab", _logits_inputs, lambda i, s: Ref(i["x"].max(-1)),
       lambda t, s: t["x"].argmax(-1), graph("ArgMax", "x[b,v]", "y:int64[b]", axis=-1, keepdims=0), plain_feeds,
       compare=_argmax_compare),
    Op("topk", "top-k over the vocab (values sorted, indices point at them)", _logits_inputs, _topk_ref,
       _topk_torch, graph("TopK", "x[b,v] k:int64[1]", "values[b,kk] indices:int64[b,kk]", axis=-1, largest=1,
                          sorted=1), _topk_feeds, onnx_post=lambda outs, s: (outs[0], outs[1]), compare=_topk_compare),
)
