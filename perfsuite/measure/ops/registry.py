"""Operator registry: the ops of :mod:`perfsuite.measure.ops.impl` (contract: :class:`.impl.base.Op`), matrix order."""

from __future__ import annotations

from perfsuite.measure.ops.impl import attention, dense, pointwise, quant
from perfsuite.measure.ops.impl.base import FLOAT_DTYPES, ORT_DTYPES, Op, Ref, round_to
from perfsuite.measure.ops.impl.quant import pack_matmulnbits

__all__ = ["FLOAT_DTYPES", "OPS", "ORT_DTYPES", "Op", "Ref", "get", "pack_matmulnbits", "public_ops", "round_to"]

OPS: dict[str, Op] = {op.name: op for op in (*dense.OPS, *attention.OPS, *pointwise.OPS, *quant.OPS)}


def public_ops() -> list[str]:
    return [n for n, op in OPS.items() if not op.hidden]


def get(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known: {', '.join(public_ops())}") from None
