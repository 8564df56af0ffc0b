"""CPU facts, read from /proc and /sys without importing anything heavy."""

from __future__ import annotations

import os
import platform
from typing import Any

from perfsuite.doctor.host import Host
from perfsuite.runner_class import cpu_count, cpu_model

FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "fma", "neon", "asimd")


def _size_bytes(text: str) -> int | None:
    t = text.strip().upper()
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}
    try:
        if t and t[-1] in mult:
            return int(float(t[:-1]) * mult[t[-1]])
        return int(t)
    except ValueError:
        return None


def last_level_cache_bytes(host: Host) -> int | None:
    """The largest cache of CPU 0 (its L3 on x86) from sysfs."""
    sizes = []
    for d in host.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        text = host.read_text(f"{d}/size")
        if text:
            b = _size_bytes(text)
            if b:
                sizes.append(b)
    return max(sizes) if sizes else None


def memory_total_bytes(host: Host) -> int | None:
    for line in (host.read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def facts(host: Host) -> dict[str, Any]:
    flags: set[str] = set()
    for line in (host.read_text("/proc/cpuinfo") or "").splitlines():
        if line.startswith(("flags", "Features")):
            flags = set(line.split(":", 1)[1].split())
            break
    return {"model": cpu_model(), "cores": cpu_count(), "logical_cpus": os.cpu_count(),
            "machine": platform.machine(), "system": platform.system(),
            "memory_total_bytes": memory_total_bytes(host), "llc_bytes": last_level_cache_bytes(host),
            "flags": [f for f in FLAGS_OF_INTEREST if f in flags]}
