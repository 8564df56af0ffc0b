"""Risky op cells in worker processes: a device fault (abort, segfault, hang) kills one cell, not the session.

Each cell is an ``op`` job on :mod:`perfsuite.measure.worker.pool`, in a child forked from a zygote that imported
torch and ONNX Runtime once (~0.1 s a cell); a child that dies or does not answer in time makes the cell ``crash``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from perfsuite.measure.ops.runner import OpResult
from perfsuite.measure.ops.shapes import Shape

PRELOAD = ("torch", "numpy", "perfsuite.measure.ops.runner", "perfsuite.measure.ops.registry")


class Worker:
    def __init__(self, timeout_s: float = 300.0, env: Mapping[str, str] | None = None) -> None:
        """``env``: the children's whole environment (default: this process's), as for ``subprocess``."""
        from perfsuite.measure.worker import pool

        side = pool.this_side("op")
        if env is not None:
            path = os.pathsep.join(p for p in (str(side.tree), env.get("PYTHONPATH", "")) if p)
            side = replace(side, env=tuple({**env, "PYTHONPATH": path}.items()))
        self.timeout_s = timeout_s
        self.pool = pool.Pool(side, preload=PRELOAD)
        self.crashes = 0

    def run(self, op: str, backend: str, dtype: str, shape: Shape, seed: int, device: str = "cpu") -> OpResult:
        job = {"kind": "op", "op": op, "backend": backend, "dtype": dtype, "shape": shape.as_dict(), "seed": seed,
               "device": device, "index": 0, "label": "op"}
        pr = self.pool.measure(job, fork=True, timeout_s=self.timeout_s, keep_failed=False)
        found = pr.backend_info.get("op_result")
        if pr.error is None and isinstance(found, dict):
            return OpResult.from_dict(found)
        self.crashes += 1
        tail = [ln.rstrip() for ln in pr.detail.splitlines() if ln.strip() and "USDT" not in ln][-8:]
        return OpResult(op, backend, dtype, shape.as_dict(), seed, "crash",
                          detail=(pr.error or "no result") + (f"; log: {tail[-1]}" if tail else ""),
                          seconds=pr.wall_s, extra={"stderr_tail": tail})

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
