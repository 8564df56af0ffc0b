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


# /proc/cpuinfo's first processor on the 2-core Xeon this was written on (2026-12-05), and the issue-40 machine: the
# same brand string, another CPUID model and stepping, a slower clock and a smaller LLC
CPUINFO_167 = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 167\n"
               "model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 1\ncpu MHz\t\t: 2600.000\n\n"
               "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 99\n")
BASE_167 = {"perfsuite": {"doctor": {"cpu": {"cores": 2, "llc_bytes": 503316480, "memory_total_bytes": 25276063744}}},
            # pytest-benchmark's py-cpuinfo facts, as in baselines/cpu-intel-xeon-amx-2c/0010_smoke_3aae1d5*.json
            "cpu": {"vendor_id_raw": "GenuineIntel", "family": 6, "model": 167, "stepping": 1,
                    "hz_advertised": [2600000000, 0], "l3_cache_size": 503316480}}


def test_cpuid_facts_of_the_first_processor() -> None:
    from perfsuite.machine.doctor.cpu import cpuid

    assert cpuid(CPUINFO_167) == {"vendor": "GenuineIntel", "family": 6, "model_number": 167, "stepping": 1,
                                  "clock_mhz": 2600.0}
    assert cpuid("Processor\t: AArch64\n") == {}


def test_same_class_other_machine_is_named_up_front() -> None:
    here = machine.machine_of({"cpu": {"vendor": "GenuineIntel", "family": 6, "model_number": 207, "stepping": 2,
                                       "clock_mhz": 2100.0, "llc_bytes": 300 * 2**20, "cores": 2,
                                       "memory_total_bytes": 25276063744}})
    line = machine.machine_differs(here, [run(BASE_167)])
    assert line == ("this machine differs from the baselines' machine in what decides speed (CPUID model 207 vs 167, "
                    "stepping 2 vs 1, clock 2.1 GHz vs 2.6 GHz, LLC 300 MiB vs 480 MiB; here vs the newest baseline "
                    "run): the screen's numbers compare machines, not code; only an A/B against the baselines' commit, "
                    "both trees measured here and now, is evidence about the code")
    # the baselines' own machine (one of several), and a run that recorded nothing to compare: no line
    same = machine.machine_of({"cpu": {"vendor": "GenuineIntel", "family": 6, "model_number": 167, "stepping": 1,
                                       "clock_mhz": 2600.0, "llc_bytes": 503316480, "cores": 2}})
    assert machine.machine_differs(same, [run(BASE_167)]) is None
    assert machine.machine_differs(here, [run(BASE_167), run({"perfsuite": {"doctor": here and {"cpu": {
        "model_number": 207, "stepping": 2, "clock_mhz": 2100.0, "llc_bytes": 300 * 2**20}}}})]) is None
    assert machine.machine_differs(here, [run({})]) is None and machine.machine_differs(here, []) is None
    # GPUs: the doctor's first device
    a = machine.machine_of({"gpus": [{"name": "AMD Instinct MI300X", "arch": "gfx942", "driver": "6.8.5"}]})
    b = machine.machine_of({"gpus": [{"name": "AMD Instinct MI300X", "arch": "gfx942", "driver": "6.10.5"}]})
    line = machine.machine_differs(a, [run({"perfsuite": {"doctor": {"gpus": [{"name": "AMD Instinct MI300X",
                                                                              "arch": "gfx942", "driver": "6.10.5"}]}}})])
    assert line is not None and "GPU driver 6.8.5 vs 6.10.5" in line and machine.machine_differs(b, [run(
        {"perfsuite": {"doctor": {"gpus": [{"name": "AMD Instinct MI300X", "arch": "gfx942", "driver": "6.10.5"}]}}})]) is None
