"""The ops known-gap lookup under several runner classes: gaps are keyed by what decides them, not the CPU model."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsuite.ops import known_gaps, registry, runner
from perfsuite.ops.shapes import Shape
from perfsuite.runner_class import detect

ROOT = Path(__file__).resolve().parents[2]

# ---- the ops known-gap lookup under several runner classes ----------------------------------------------------------
# Real cells that are not `pass` on this machine's ONNX Runtime: GQA with batch > 1 over a KV cache, and the int8
# matmul in float16. Their known gaps belong to onnxruntime, so every CPU class must know them; a class-keyed file
# (the old baselines/known_gaps/<cpu model>.toml) knew them on one machine only.
GQA_BATCH3 = Shape("odd", batch=3, new=13, past=31, kv_heads=1, ratio=2, head_dim=80, hidden=97, inter=131, vocab=509,
                   group=32, topk=5)
CELLS = [("sdpa_kvcache", "onnxruntime-cpu", "float32", GQA_BATCH3),
         ("int8_dynamic_matmul", "onnxruntime-cpu", "float16", GQA_BATCH3)]


@pytest.fixture(scope="module")
def results():
    out = []
    for op, backend, dtype, shape in CELLS:
        assert op in registry.public_ops()
        r = runner.evaluate(op, backend, dtype, shape)
        out.append({"op": op, "backend": backend, "dtype": dtype, "shape_class": shape.shape_class,
                    "worst": r.status, "n": 1, "detail": r.detail})
    return out


@pytest.mark.parametrize("rc", [detect("cpu")[0], "cpu-amd-epyc-2c", "cpu-ampere-altra-4c"])
def test_known_gaps_hold_on_every_cpu_class(results, rc):
    assert [c["worst"] for c in results] == ["unsupported", "unsupported"], results  # still gaps here
    found = known_gaps.for_runner(rc, known_gaps.directory_for(ROOT))
    assert found.characterised, found.describe()
    report = known_gaps.evaluate(results, found.gaps, found.characterised)
    assert report.new == [] and report.uncharacterised == [] and len(report.known) == 2


def test_an_unknown_family_is_reported_not_failed(results):
    found = known_gaps.for_runner("npu-vendor-x1", known_gaps.directory_for(ROOT))
    assert not found.characterised and "new, not yet characterised" in found.describe()
    report = known_gaps.evaluate(results, found.gaps, found.characterised)
    assert report.new == []  # the onnxruntime gaps of all.toml still apply to it


# The three tests that failed on a fresh cpu-amd-epyc-2c VM (issue 9), run as the README's `pytest` runs them.
ISSUE_9_FAILURES = ["tests/ops/test_op_shapes.py::test_op[sdpa_kvcache-onnxruntime-cpu-float32]",
                    "tests/ops/test_op_shapes.py::test_op[sdpa_kvcache-onnxruntime-cpu-float16]",
                    "tests/ops/test_op_shapes.py::test_op[int8_dynamic_matmul-onnxruntime-cpu-float16]"]


@pytest.mark.parametrize(("rc", "how"), [("cpu-amd-epyc-2c", "env"), ("cpu-amd-epyc-2c", "option"),
                                       ("cpu-intel-xeon-2c", "env")])
def test_op_shape_tests_pass_on_another_cpu_class(rc, how, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PERFSUITE_RUNNER_CLASS", None)
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--basetemp={tmp_path / 'bt'}",
            *ISSUE_9_FAILURES]
    if how == "env":
        env["PERFSUITE_RUNNER_CLASS"] = rc
    else:
        args += ["--perf-runner-class", rc]
    res = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "3 passed" in res.stdout and f"runner class {rc} (characterised)" in res.stdout
