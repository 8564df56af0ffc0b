"""CPU facts, read from /proc and /sys through the doctor's :class:`Host` without importing anything heavy; the model,
cores, flags and tier come from :mod:`perfsuite.machine.capabilities`, without ``PERFSUITE_CPU_FLAGS`` (docs/doctor.md).
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
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    try:
        return int(float(t[:-1]) * scale) if scale > 1 else int(t)
    except ValueError:
        return None


def last_level_cache_bytes(host: Host) -> int | None:
    """The largest cache of CPU 0 (its L3 on x86) from sysfs."""
    caches = host.glob("/sys/devices/system/cpu/cpu0/cache/index*")
    return max((b for b in (_size_bytes(host.read_text(f"{d}/size") or "") for d in caches) if b), default=None)


def meminfo_bytes(host: Host, key: str = "MemTotal") -> int | None:
    """A /proc/meminfo field (``MemTotal``, ``MemAvailable``) in bytes."""
    for line in (host.read_text("/proc/meminfo") or "").splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    return None


def facts(host: Host) -> dict[str, Any]:
    caps = capabilities.detect(cpuinfo=host.read_text("/proc/cpuinfo") or "", env={})
    rc = runner_class.from_facts("cpu", {"cpu_model": caps.model, "cores": caps.cores, "cpu_tier": caps.tier})
    return {"model": caps.model, "cores": caps.cores, "logical_cpus": os.cpu_count(),
            "machine": platform.machine(), "system": platform.system(),
            "memory_total_bytes": meminfo_bytes(host), "llc_bytes": last_level_cache_bytes(host),
            "flags": [f for f in FLAGS_OF_INTEREST if f in caps.flags], "tier": caps.tier, "runner_class": rc}
