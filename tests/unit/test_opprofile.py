"""perfsuite.measure.opprofile's reading of torch profiler events: the same self times as ``key_averages()``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from perfsuite.measure.opprofile import self_times


@dataclass
class Ev:
    name_: str
    start: int
    end: int
    thread: int = 1
    kind: str = "kernel"

    def activity_type(self) -> str:
        return self.kind

    def name(self) -> str:
        return self.name_

    def start_ns(self) -> int:
        return self.start

    def end_ns(self) -> int:
        return self.end

    def start_thread_id(self) -> int:
        return self.thread


def test_self_time_is_the_event_less_its_nested_events_per_thread() -> None:
    events = [
        Ev("aten::linear", 0, 10_000_000),  # 10 ms, holding matmul (6 ms) which holds mm (5 ms)
        Ev("aten::matmul", 1_000_000, 7_000_000),
        Ev("aten::mm", 1_500_000, 6_500_000),
        Ev("aten::add", 8_000_000, 9_000_000),  # 1 ms, a second child of linear
        Ev("aten::mm", 2_000_000, 4_000_000, thread=2),  # another thread: not nested in linear
        Ev("aten::div_", 20_000_000, 23_000_000),  # div_ whose only child is a div_: one call, as torch counts
        Ev("aten::div_", 20_500_000, 22_500_000),
    ]
    ops, calls = self_times(events)
    assert ops == pytest.approx({"aten::linear": 3.0, "aten::matmul": 1.0, "aten::mm": 7.0, "aten::add": 1.0,
                                 "aten::div_": 3.0})
    assert calls == {"aten::linear": 1, "aten::matmul": 1, "aten::mm": 2, "aten::add": 1, "aten::div_": 1}


def test_self_times_of_a_real_profile_match_key_averages() -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64)
    lin = torch.nn.Linear(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            y = torch.nn.functional.softmax(lin(x) * 2, dim=-1)
            y.div_(3.0)
    raw = prof.profiler.kineto_results.events()
    ops, calls = self_times(e for e in raw if e.device_type() == torch.autograd.DeviceType.CPU)
    ref = {e.key: e for e in prof.key_averages() if e.self_cpu_time_total > 0}
    assert set(ops) >= set(ref) and {k for k, v in ops.items() if v > 0} == set(ref)
    for key, e in ref.items():
        assert ops[key] == pytest.approx(e.self_cpu_time_total / 1e3, rel=1e-9), key
        assert calls[key] == e.count, key


def test_a_gpu_profile_counts_each_kernel_once_under_its_own_name() -> None:
    """On ROCm and CUDA the kernels are the operators: two launches of one GEMM kernel and a copy, each its own
    duration (device events do not nest); CPU operators, which carry their kernels' time in ``key_averages()``, and
    device-side annotation ranges, which span kernels, are not counted."""
    from perfsuite.measure.opprofile import device_times

    events = [Ev("Cijk_Ailk_Bljk_SB_MT64x64", 0, 2_000_000, thread=7),
              Ev("Memcpy HtoD (Pageable -> Device)", 2_500_000, 3_000_000, thread=7),
              Ev("Cijk_Ailk_Bljk_SB_MT64x64", 4_000_000, 5_500_000, thread=7),
              Ev("forward", 0, 5_500_000, thread=7, kind="gpu_user_annotation"),
              Ev("aten::mm", 0, 1_000_000, kind="cpu_op")]
    ops, calls = device_times(events)
    assert ops == pytest.approx({"Cijk_Ailk_Bljk_SB_MT64x64": 3.5, "Memcpy HtoD (Pageable -> Device)": 0.5})
    assert calls == {"Cijk_Ailk_Bljk_SB_MT64x64": 2, "Memcpy HtoD (Pageable -> Device)": 1}


def test_an_ort_profile_counts_the_node_events_inside_the_profiled_runs_only(tmp_path) -> None:
    """ONNX Runtime's profile: node events (``*_kernel_time``) are counted when they fall inside a ``model_run`` of
    the profiled generations, bounds included; the runs before (load, warm-up) and events between runs are not."""
    import json

    pytest.importorskip("onnxruntime")
    from perfsuite.measure.opprofile import OrtSessions

    def node(op: str, ts: int, dur: int) -> dict:
        return {"cat": "Node", "name": f"/m/{op}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}

    events = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},  # warm-up: before the profiled runs
              node("MatMul", 10, 50),
              {"cat": "Session", "name": "model_run", "ts": 1000, "dur": 100},
              node("MatMul", 1000, 40), node("Add", 1100, 5),  # at both bounds of the run
              node("Add", 1500, 7),  # between runs
              {"cat": "Session", "name": "model_run", "ts": 2000, "dur": 100},
              node("MatMul", 2050, 30), {"cat": "Node", "name": "/m/MatMul_fence_before", "ts": 2060, "dur": 1}]
    events.reverse()  # the file's order is not the time order
    path = tmp_path / "ort.json"
    path.write_text(json.dumps(events))

    class Session:
        _perfsuite_runs = 1

        def end_profiling(self) -> str:
            return str(path)

    sessions = OrtSessions(tmp_path / "p")
    sessions.made.append(Session())
    out = sessions.profile(lambda: 8, tmp_path / "trace.json")
    assert out["ops"] == pytest.approx({"MatMul": 0.07, "Add": 0.005})
    assert out["calls"] == {"MatMul": 2, "Add": 1} and out["tokens"] == 8
    assert len(json.loads((tmp_path / "trace.json").read_text())) == len(events)
