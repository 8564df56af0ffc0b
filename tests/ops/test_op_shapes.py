"""Hypothesis shape tests: every LLM op on the backends/dtypes of this runner, against its float64 reference.

A non-pass example (wrong, NaN, unsupported, fallback, crash) fails the test unless the runner class's known-gaps
files list it, or no file characterises this machine's feature set (then it is reported in the summary as not yet
characterised); hypothesis then shrinks the shape and prints the reproduce blob. Canonical shapes of each shape
class run first as explicit examples; ``target`` steers generation toward large error/tolerance ratios.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import event, example, given, settings, target
from hypothesis import strategies as st

from perfsuite.measure.ops import known_gaps, registry, runner
from perfsuite.measure.ops.shapes import SHAPE_CLASSES, canonical, llm_shapes

BOUNDS = "small"
CANON = [s for shapes in canonical(BOUNDS).values() for s in shapes]
ANY_SHAPE = st.sampled_from(SHAPE_CLASSES).flatmap(lambda c: llm_shapes(c, BOUNDS))

CELLS = [(op, "torch", dt) for op in registry.public_ops() for dt in ("float32", "bfloat16")]
CELLS += [(op, "onnxruntime-cpu", dt) for op in registry.public_ops() for dt in ("float32", "float16")]
# torch.compile costs seconds per (op, dtype) on 2 cores: a few representative ops only in CI.
COMPILE_OPS = ("linear", "rmsnorm", "sdpa_kvcache")


def _check(op: str, backend: str, dtype: str, shape, gaps, result=None) -> None:
    r = result or runner.evaluate(op, backend, dtype, shape)
    gaps.record(op, backend, dtype, shape.shape_class, r.status)
    event(f"{shape.shape_class}: {r.status}")
    target(min(r.max_ratio, 1e12) if math.isfinite(r.max_ratio) else 1e12, label="error / tolerance")
    if r.status == "pass":
        return
    gap = known_gaps.find(gaps.gaps, op, backend, dtype, shape.shape_class, r.status)
    if gap is not None:
        return
    if not gaps.characterised:  # a feature set nobody has characterised yet: report, do not fail
        gaps.note_uncharacterised(op, backend, dtype, shape.shape_class, f"{r.status}: {r.detail}")
        return
    raise AssertionError(f"new operator gap: {op} on {backend}/{dtype} at {shape.describe()}: {r.status}: "
                         f"{r.detail}\nrepro: perfsuite ops --repro '{__import__('json').dumps(r.repro())}'\n"
                         f"(known gap? add it to baselines/known_gaps/: all.toml if it belongs to the backend or "
                         f"library version, {gaps.runner_class}.toml if only to this machine; see docs/ops.md)")


def _with_examples(fn):
    for s in CANON:
        fn = example(shape=s)(fn)
    return fn


@pytest.mark.parametrize("op,backend,dtype", CELLS, ids=["-".join(c) for c in CELLS])
@given(shape=ANY_SHAPE)
@_with_examples
def test_op(op, backend, dtype, shape, ops_gaps):
    _check(op, backend, dtype, shape, ops_gaps)


@pytest.mark.parametrize("op", COMPILE_OPS)
@settings(max_examples=2)
@given(shape=ANY_SHAPE)
@example(shape=canonical(BOUNDS)["decode"][0])
@example(shape=canonical(BOUNDS)["odd"][0])
def test_op_compiled(op, shape, ops_gaps):
    _check(op, "torch-compile", "float32", shape, ops_gaps)


@pytest.fixture(scope="module")
def worker():
    from perfsuite.measure.ops.worker import Worker

    with Worker(timeout_s=120) as w:
        yield w


@settings(max_examples=3)
@given(shape=ANY_SHAPE)
@example(shape=canonical(BOUNDS)["tile_edge"][0])
def test_int4_isolated(shape, ops_gaps, worker):
    """The subprocess path end to end: MatMulNBits (a risky contrib kernel) runs in the worker process."""
    seed = runner.seed_for("int4_awq_matmul", "float32", shape)
    r = worker.run("int4_awq_matmul", "onnxruntime-cpu", "float32", shape, seed)
    _check("int4_awq_matmul", "onnxruntime-cpu", "float32", shape, ops_gaps, result=r)
