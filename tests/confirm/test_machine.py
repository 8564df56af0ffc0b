"""Hardware identity and the start-up probe against the baselines' machine_info (pure, injected dicts)."""

from __future__ import annotations

from typing import Any

from perfsuite.orchestrate.confirm import machine

XEON = {"perfsuite": {"cpu_model": "Intel(R) Xeon(R) Processor", "torch_version": "2.13.0+cpu",
                      "doctor": {"cpu": {"flags": ["avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_bf16", "fma"]}},
                      "roofline": {"copy_bandwidth_bytes_per_s": 26e9, "matmul_flops_per_s": 410e9}}}


def run(mi: dict[str, Any]) -> dict[str, Any]:
    return {"machine_info": mi}


def test_forced_class_on_an_epyc_is_other_hardware() -> None:
    epyc = {"cpu_model": "AMD EPYC 7B13", "flags": ["avx2", "fma"], "gpu_arch": None, "gpu": None}
    line = machine.foreign_hardware(epyc, [run(XEON)])
    assert line is not None and line.startswith("incomparable: other hardware")
    assert "CPU model and instruction sets differ" in line
    assert "AMD EPYC 7B13 (avx2 fma)" in line and "Intel(R) Xeon(R) Processor (amx_bf16 amx_tile avx2" in line


def test_same_model_other_instruction_sets_is_other_hardware() -> None:
    cur = {"cpu_model": "Intel(R) Xeon(R) Processor", "flags": ["avx2", "fma"]}
    assert "instruction sets differ" in (machine.foreign_hardware(cur, [run(XEON)]) or "")


def test_same_hardware_and_unrecorded_fields_are_comparable() -> None:
    cur = machine.hardware_of_run(XEON)
    assert machine.foreign_hardware(cur, [run(XEON)]) is None
    old = {"cpu": {"brand_raw": "Intel(R) Xeon(R) Processor", "flags": ["avx2", "sse2", "fma"]}}  # pytest-benchmark's
    assert machine.hardware_of_run(old) == {"cpu_model": "Intel(R) Xeon(R) Processor", "flags": ["avx2", "fma"],
                                            "gpu_arch": None, "gpu": None}
    assert machine.foreign_hardware({"cpu_model": "x", "flags": None}, [run({})]) is None


def test_gpu_arch_differs() -> None:
    mi = {"perfsuite": {"cpu_model": "c", "arch": "gfx942", "device_name": "MI300X"}}
    line = machine.foreign_hardware({"cpu_model": "c", "gpu_arch": "gfx90a", "gpu": "MI250X"}, [run(mi)])
    assert line is not None and "GPU arch differ" in line and "gfx942" in line and "gfx90a" in line


def test_probe_beyond_its_noise_is_stated() -> None:
    runs = [run({"perfsuite": {"roofline": {"copy_bandwidth_bytes_per_s": v, "matmul_flops_per_s": 400e9}}})
            for v in (25e9, 26e9, 26.5e9, 25.5e9)]
    assert machine.probe_lines({"copy_bandwidth_bytes_per_s": 25.8e9, "matmul_flops_per_s": 395e9}, runs) == []
    (line,) = machine.probe_lines({"copy_bandwidth_bytes_per_s": 18e9, "matmul_flops_per_s": 401e9}, runs)
    assert "copy bandwidth 18 GB/s now vs 25.7 GB/s" in line and "-30%" in line and "beyond their noise" in line
    assert machine.probe_lines(None, runs) == [] and machine.probe_lines({"matmul_flops_per_s": 1e9}, []) == []


def test_version_diffs() -> None:
    assert machine.version_diffs({"torch_version": "2.13.0+cpu"}, [run(XEON)]) == []
    assert machine.version_diffs({"torch_version": "2.14.0+cpu"}, [run(XEON)]) == [
        "torch 2.13.0+cpu (baselines) vs 2.14.0+cpu (here)"]
