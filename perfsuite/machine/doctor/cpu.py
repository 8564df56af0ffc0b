"""CPU facts, read from /proc and /sys without importing anything heavy.

The model, cores, flags and instruction-set tier come from :mod:`perfsuite.machine.capabilities` (the one source of CPU facts,
the runner class's too), read through the doctor's :class:`Host`; the doctor shows the CPU as it is, so
``PERFSUITE_CPU_FLAGS`` (a test hook that changes the perf suite's decisions) is not applied here.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from perfsuite.machine import capabilities, runner_class
from perfsuite.machine.doctor.host import Host

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
    caches = host.glob("/sys/devices/system/cpu/cpu0/cache/index*")
    sizes = (_size_bytes(host.read_text(f"{d}/size") or "") for d in caches)
    return max((b for b in sizes if b), default=None)


def memory_total_bytes(host: Host) -> int | None:
    for line in (host.read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def facts(host: Host) -> dict[str, Any]:
    caps = capabilities.detect(cpuinfo=host.read_text("/proc/cpuinfo") or "", env={})
    rc = runner_class.from_facts("cpu", {"cpu_model": caps.model, "cores": caps.cores, "cpu_tier": caps.tier})
    return {"model": caps.model, "cores": caps.cores, "logical_cpus": os.cpu_count(),
            "machine": platform.machine(), "system": platform.system(),
            "memory_total_bytes": memory_total_bytes(host), "llc_bytes": last_level_cache_bytes(host),
            "flags": [f for f in FLAGS_OF_INTEREST if f in caps.flags], "tier": caps.tier, "runner_class": rc}
