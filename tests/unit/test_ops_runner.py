import json

import pytest

from perfsuite.measure.ops import ort_adapter, runner
from perfsuite.measure.ops.matrix import Matrix
from perfsuite.measure.ops.shapes import canonical
from perfsuite.measure.ops.worker import Worker

S = canonical()["decode"][0]


def test_pass_and_repro():
    r = runner.evaluate("rmsnorm", "torch", "float32", S)
    assert r.status == "pass", r.detail
    blob = r.repro()
    again = runner.evaluate(blob["op"], blob["backend"], blob["dtype"], S, blob["seed"])
    assert again.seed == r.seed and again.max_ratio == r.max_ratio


def test_nan_is_wrong(test_ops):
    r = runner.evaluate("_nan", "torch", "float32", S)
    assert r.status == "wrong" and r.nan_where_finite == 1 and "NaN" in r.detail


def test_raise_is_unsupported():
    r = runner.evaluate("linear", "onnxruntime-cpu", "bfloat16", S)
    assert r.status == "unsupported" and "bfloat16" in r.detail


def test_wrong_device_is_fallback(monkeypatch):
    import torch

    op = runner.registry.get("silu")
    monkeypatch.setattr(op, "torch", lambda t, s: torch.nn.functional.silu(t["x"]).to("meta"))
    r = runner.evaluate("silu", "torch", "float32", S)
    # a meta tensor cannot be compared: still never a pass
    assert r.status in ("fallback", "wrong", "unsupported")


def test_sdpa_kernel_family_checked():
    r = runner.evaluate("sdpa_kvcache", "torch", "float32", S)
    assert r.status == "pass" and r.extra["sdpa_kernels"] == ["flash"]


def test_sdpa_math_kernel_is_a_fallback(monkeypatch):
    monkeypatch.setattr(runner, "expected_sdpa", lambda device, dtype: frozenset({"efficient"}))
    r = runner.evaluate("sdpa_causal", "torch", "float32", S)
    assert r.status == "fallback" and "flash" in r.detail


def test_ort_placement_fallback_reason():
    p = ort_adapter.Placement("MIGraphXExecutionProvider", ["MIGraphXExecutionProvider", "CPUExecutionProvider"],
                              {"MIGraphXExecutionProvider": 2, "CPUExecutionProvider": 5})
    assert "5/7 node(s)" in p.fallback_reason()
    missing = ort_adapter.Placement("ROCMExecutionProvider", ["CPUExecutionProvider"], {"CPUExecutionProvider": 1})
    assert "session runs on" in missing.fallback_reason()
    ok = ort_adapter.Placement("CPUExecutionProvider", ["CPUExecutionProvider"], {"CPUExecutionProvider": 3})
    assert ok.fallback_reason() is None


def test_ort_cpu_cell_records_placement():
    r = runner.evaluate("gelu", "onnxruntime-cpu", "float32", S)
    assert r.status == "pass" and r.extra["placement"]["nodes_per_ep"] == {"CPUExecutionProvider": 1}


def test_worker_isolates_a_crash(test_ops_env):
    with Worker(timeout_s=120, env=test_ops_env) as w:
        ok = w.run("silu", "torch", "float32", S, 3)
        crash = w.run("_abort", "torch", "float32", S, 3)
        after = w.run("silu", "onnxruntime-cpu", "float32", S, 3)  # a fresh child takes over
    assert ok.status == "pass" and after.status == "pass"
    assert crash.status == "crash" and "SIGABRT" in crash.detail and w.crashes == 1


def test_worker_kills_a_hung_cell_and_leaves_no_process(test_ops_env, tmp_path, monkeypatch):
    """A cell past its timeout is a crash; its child is killed and the worker's folder is gone after close."""
    import tempfile

    import psutil

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with Worker(timeout_s=5, env=test_ops_env) as w:
        hung = w.run("_hang", "torch", "float32", S, 3)
        after = w.run("silu", "torch", "float32", S, 3)
    assert hung.status == "crash" and "timed out after 5 s" in hung.detail, hung.detail
    assert after.status == "pass"
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]
    assert not left and not list(tmp_path.glob("perfsuite-workers-*"))


def test_matrix_worst_and_first_failure(test_ops):
    m = Matrix()
    a = runner.evaluate("silu", "torch", "float32", S)
    b = runner.evaluate("_nan", "torch", "float32", S)
    b.op = "silu"
    m.add(a)
    m.add(b)
    (cell,) = m.cell_dicts()
    assert cell["worst"] == "wrong" and cell["counts"] == {"pass": 1, "wrong": 1} and cell["repro"]["seed"] == b.seed
    meta = {"runner_class": "rc"}
    assert "**WRONG** 1/2" in m.to_markdown(meta)
    assert json.loads(m.to_json(meta))["cells"][0]["worst"] == "wrong"


@pytest.mark.parametrize("backend", ["onnxruntime-migraphx", "onnxruntime-rocm"])
def test_unavailable_ep_is_skipped_not_a_gap(backend):
    from perfsuite.measure.ops.sweep import available_backends

    ok, skipped = available_backends([backend, "torch"])
    assert ok == ["torch"] and backend in skipped
