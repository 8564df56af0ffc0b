"""Test-only ops (a process that dies, an output with one NaN): not in the production registry.

``register()`` adds them to :data:`perfsuite.measure.ops.registry.OPS` (``hidden``: never in the matrix). The
``test_ops`` fixture does so for this process; ``test_ops_env`` gives a worker child an environment whose
``sitecustomize`` does so at interpreter start (the children of the op worker are forked from a ``python -m perfsuite.measure.worker serve`` zygote).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from perfsuite.measure.ops import registry
from perfsuite.measure.ops.impl.base import Op, Ref, rng_for, round_to
from perfsuite.measure.ops.shapes import Shape


def _abort_torch(t: dict[str, Any], s: Shape) -> Any:
    os.abort()  # simulates a device fault (the process dies) for the subprocess-runner tests


def _hang_torch(t: dict[str, Any], s: Shape) -> Any:
    import time

    time.sleep(3600)  # simulates a kernel that never returns, for the worker's timeout


def _identity_ref(i: dict[str, np.ndarray], s: Shape) -> Ref:
    return Ref(i["x"])


def _nan_torch(t: dict[str, Any], s: Shape) -> Any:
    y = t["x"].clone()
    y.view(-1)[0] = float("nan")
    return y


def _ident_inputs(s: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    return {"x": round_to(rng_for(seed).standard_normal((s.batch, s.new, 8)), dtype)}


TEST_OPS = (
    Op("_abort", "test-only: the process dies", _ident_inputs, _identity_ref, _abort_torch, hidden=True),
    Op("_nan", "test-only: one NaN", _ident_inputs, _identity_ref, _nan_torch, hidden=True),
    Op("_hang", "test-only: never returns", _ident_inputs, _identity_ref, _hang_torch, hidden=True),
)


def register() -> None:
    for op in TEST_OPS:
        registry.OPS[op.name] = op
