"""Hypothesis-driven sweep that fills the coverage matrix (the engine of ``perfsuite ops``, docs/ops.md).

Each shape drawn for an op and shape class (canonical shapes first) runs on every (backend, dtype) column. Failures
are recorded, not raised, so the search goes on; ``hypothesis.target`` steers it toward the largest
error/tolerance ratio per column.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from perfsuite.measure.ops import registry, runner
from perfsuite.measure.ops.matrix import Matrix
from perfsuite.measure.ops.runner import OpResult
from perfsuite.measure.ops.shapes import BOUNDS, SHAPE_CLASSES, Shape, canonical, llm_shapes


@dataclass
class SweepConfig:
    ops: list[str]
    backends: list[str]
    dtypes: list[str]
    classes: list[str] = field(default_factory=lambda: list(SHAPE_CLASSES))
    bounds: str = "small"
    examples: int = 4  # hypothesis max_examples per (op, shape class), canonical examples included
    device: str = "cpu"
    isolate: str = "risky"  # none | risky | all
    derandomize: bool = True
    database: object | None = None
    timeout_s: float = 300.0


def available_backends(backends: list[str]) -> tuple[list[str], dict[str, str]]:
    from perfsuite.measure.ops import ort_adapter

    def reason(b: str) -> str | None:
        if b.startswith("onnxruntime"):
            return ort_adapter.availability(b)
        return None if b in runner.TORCH_BACKENDS else f"unknown backend; use one of {', '.join(runner.BACKENDS)}"

    reasons = [(b, reason(b)) for b in backends]
    return [b for b, r in reasons if not r], {b: r for b, r in reasons if r}


def run_sweep(cfg: SweepConfig, progress: Callable[[str], None] | None = None) -> Matrix:
    from hypothesis import HealthCheck, Phase, example, given, settings, target

    from perfsuite.measure.ops.worker import Worker

    matrix = Matrix()
    backends, matrix.skipped = available_backends(cfg.backends)
    columns = [(b, d) for b in backends for d in cfg.dtypes
               if d in (registry.ORT_DTYPES if b.startswith("onnxruntime") else registry.FLOAT_DTYPES)]
    bounds = BOUNDS[cfg.bounds]
    examples = canonical(bounds)
    worker = Worker(timeout_s=cfg.timeout_s) if cfg.isolate != "none" else None

    def one(op_name: str, backend: str, dtype: str, shape: Shape) -> OpResult:
        op = registry.get(op_name)
        seed = runner.seed_for(op_name, dtype, shape)
        if worker is not None and (cfg.isolate == "all" or op.risky):
            return worker.run(op_name, backend, dtype, shape, seed, cfg.device)
        return runner.evaluate(op_name, backend, dtype, shape, seed, cfg.device)

    try:
        for op_name in cfg.ops:
            for cls in cfg.classes:
                t0 = time.perf_counter()
                seen: set[Shape] = set()

                def probe(shape: Shape) -> None:
                    if shape in seen:  # hypothesis may replay a shape while targeting: count it once
                        return
                    seen.add(shape)
                    for backend, dtype in columns:
                        r = one(op_name, backend, dtype, shape)
                        matrix.add(r)
                        ratio = r.max_ratio if math.isfinite(r.max_ratio) else 1e12
                        target(min(ratio, 1e12), label=f"{backend}/{dtype}")

                test = given(llm_shapes(cls, bounds))(probe)
                for ex in examples.get(cls, []):
                    test = example(ex)(test)
                test = settings(max_examples=max(cfg.examples, 1), derandomize=cfg.derandomize,
                                database=cfg.database, deadline=None,  # type: ignore[arg-type]
                                phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target),
                                suppress_health_check=list(HealthCheck))(test)
                test()
                if progress:
                    progress(f"{op_name:22s} {cls:10s} {len(seen):3d} shapes x {len(columns)} columns "
                             f"{time.perf_counter() - t0:6.1f}s")
    finally:
        if worker is not None:
            worker.close()
    return matrix


def repro(blob: dict, device: str = "cpu", isolate: bool = False) -> OpResult:
    """Rerun one cell from a ``OpResult.repro()`` dict."""
    shape = Shape.from_dict(blob["shape"])
    if isolate:
        from perfsuite.measure.ops.worker import Worker

        with Worker() as w:
            return w.run(blob["op"], blob["backend"], blob["dtype"], shape, int(blob["seed"]), device)
    return runner.evaluate(blob["op"], blob["backend"], blob["dtype"], shape, int(blob["seed"]), device)
