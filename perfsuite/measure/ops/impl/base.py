"""The op contract (:class:`Op`, :class:`Ref`) and the helpers every op definition uses.

An :class:`Op` knows how to

* ``make_inputs(shape, dtype, seed)``: numpy inputs, float ones already rounded to ``dtype`` (held as float64);
* ``reference(inputs, shape)``: a :class:`Ref` (float64 output, error magnitude ``mag``, reduction length ``k``,
  extra absolute tolerance for quantized ops);
* ``torch(inputs, shape)``: the eager implementation (also what ``torch.compile`` compiles), on torch tensors
  already in the cell's dtype and on its device;
* ``onnx(shape, dtype)``: a single-op ONNX graph (``onnx.helper``) and ``onnx_feeds(inputs, shape, dtype)``;
  ``onnx_post(outputs, shape)`` maps ORT outputs back to the reference layout.

Shapes come from :mod:`perfsuite.measure.ops.shapes`. Tolerances from :mod:`perfsuite.measure.ops.tolerance`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfsuite.measure.ops.shapes import Shape
from perfsuite.measure.ops.tolerance import ToleranceCheck, compare, tolerance

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
    compare: Callable[[Op, Any, Ref, str, dict[str, np.ndarray]], ToleranceCheck] | None = None
    sdpa: bool = False  # a torch SDPA call: the kernel family is checked with the profiler
    risky: bool = False  # run in a subprocess when isolation is "risky"
    int_inputs: frozenset[str] = frozenset()  # inputs never cast to the float dtype
    keep_dtype: frozenset[str] = frozenset()  # float inputs kept float32 (e.g. quantization scales on ORT)
    hidden: bool = False  # not in the matrix (ops the tests register)
    torch_compiled: Callable[[dict[str, Any], Shape], Any] | None = None  # what torch.compile compiles if not .torch

    def check(self, out: Any, ref: Ref, dtype: str, inputs: dict[str, np.ndarray]) -> ToleranceCheck:
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


def np_softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def _onnx_type(dtype: str) -> int:
    from onnx import TensorProto

    return {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
            "int64": TensorProto.INT64, "int32": TensorProto.INT32, "int8": TensorProto.INT8,
            "uint8": TensorProto.UINT8}[dtype]


def onnx_model(nodes: list[Any], inputs: list[tuple[str, str, list[Any]]], outputs: list[tuple[str, str, list[Any]]],
               ms: bool = False) -> Any:
    """Opset 17 (``ms``: and com.microsoft); inputs and outputs are (name, type, dims)."""
    from onnx import helper

    g = helper.make_graph(nodes, "op",
                          [helper.make_tensor_value_info(n, _onnx_type(t), s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, _onnx_type(t), s) for n, t, s in outputs])
    imports = [helper.make_opsetid("", 17)]
    if ms:
        imports.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(g, opset_imports=imports)
    m.ir_version = 9
    return m


def node(op_type: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    """``onnx.helper.make_node`` (onnx imported on first use)."""
    from onnx import helper

    return helper.make_node(op_type, inputs, outputs, **attrs)


def feed(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(x.astype(dtype))


def plain_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    """Float inputs in the cell's dtype; integer inputs (ids, positions) as they are."""
    return {k: feed(v, dtype) if np.issubdtype(v.dtype, np.floating) else v for k, v in i.items()}
