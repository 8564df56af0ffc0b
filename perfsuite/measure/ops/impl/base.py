"""The op contract (:class:`Op`, :class:`Ref`) and the helpers every op definition uses.

``make_inputs`` gives numpy inputs, float ones already rounded to the cell's dtype (held as float64);
``reference`` computes from them a :class:`Ref` (float64 output, error magnitude ``mag``, reduction length ``k``,
extra tolerance of quantized ops); ``torch`` (also what ``torch.compile`` compiles) gets torch tensors already in
the cell's dtype and on its device; ``onnx`` builds a single-op graph, fed by ``onnx_feeds``, whose outputs
``onnx_post`` maps back to the reference layout.
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
Inputs = Callable[[Shape, str, int], dict[str, np.ndarray]]  # an op's make_inputs(shape, dtype, seed)


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
    make_inputs: Inputs
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
    if dtype != "bfloat16":  # numpy has no bfloat16
        return x.astype(dtype).astype(np.float64)
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).to(torch.float64).numpy()


rng_for = np.random.default_rng


def gaussian_x(dims: Callable[[Shape], tuple[int, ...]], scale: float) -> Inputs:
    """``make_inputs`` of one input ``x``, normal with standard deviation ``scale``."""
    return lambda s, dtype, seed: {"x": round_to(rng_for(seed).standard_normal(dims(s)) * scale, dtype)}


def nnf() -> Any:
    """``torch.nn.functional``: torch is imported on first use, so the registry loads without it."""
    import torch

    return torch.nn.functional


def _onnx_type(dtype: str) -> int:
    from onnx import TensorProto

    return int(getattr(TensorProto, "FLOAT" if dtype == "float32" else dtype.upper()))


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


def graph(op_type: str, inputs: str, outputs: str, **attrs: Any) -> Callable[[Shape, str], Any]:
    """An op's ``onnx``: one ``op_type`` node over all ``inputs`` and ``outputs``, written ``name[dims]`` or
    ``name:type[dims]`` (default type: the cell's dtype; ``[]`` a scalar), e.g. ``graph("MatMul", "x[b,s,k] w[k,n]",
    "y[b,s,n]")``. A ``domain`` attribute (com.microsoft) adds that opset."""
    def values(text: str, dtype: str) -> list[tuple[str, str, list[Any]]]:
        out = []
        for item in text.split():
            name, _, dims = item.rstrip("]").partition("[")
            name, _, typ = name.partition(":")
            out.append((name, typ or dtype, [int(d) if d.isdigit() else d for d in dims.split(",") if d]))
        return out

    def build(s: Shape, dtype: str) -> Any:
        ins, outs = values(inputs, dtype), values(outputs, dtype)
        return onnx_model([node(op_type, [v[0] for v in ins], [v[0] for v in outs], **attrs)], ins, outs,
                          ms="domain" in attrs)
    return build


def feed(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(x.astype(dtype))


def plain_feeds(i: dict[str, np.ndarray], s: Shape, dtype: str) -> dict[str, np.ndarray]:
    """Float inputs in the cell's dtype; integer inputs (ids, positions) as they are."""
    return {k: feed(v, dtype) if np.issubdtype(v.dtype, np.floating) else v for k, v in i.items()}
