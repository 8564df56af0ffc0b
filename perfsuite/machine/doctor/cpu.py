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


def cpuid(cpuinfo: str) -> dict[str, Any]:
    """What decides speed beyond the instruction-set tier, from the first processor of /proc/cpuinfo: CPUID vendor,
    family, model and stepping (a VM's brand string is often the generic "Intel(R) Xeon(R) Processor", these are
    not) and the clock the kernel reports (on x86 VMs the nominal clock: it does not follow frequency scaling)."""
    first: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep and first:
            break  # the blank line after the first processor
        first.setdefault(key.strip(), value.strip())
    out: dict[str, Any] = {}
    for key, name, kind in (("vendor_id", "vendor", str), ("cpu family", "family", int), ("model", "model_number", int),
                            ("stepping", "stepping", int), ("cpu MHz", "clock_mhz", float)):
        try:
            out[name] = kind(first[key])
        except (KeyError, ValueError):
            continue
    return out


def facts(host: Host) -> dict[str, Any]:
    text = host.read_text("/proc/cpuinfo") or ""
    caps = capabilities.detect(cpuinfo=text, env={})
    rc = runner_class.from_facts("cpu", {"cpu_model": caps.model, "cores": caps.cores, "cpu_tier": caps.tier})
    out: dict[str, Any] = {}
    injected = (host.env or {}).get(capabilities.ENV_FLAGS)
    if injected is not None:  # a test hook: say what runs here are classed as, or why the value is refused
        try:
            fake = capabilities.detect(cpuinfo=text, env={capabilities.ENV_FLAGS: injected})
            out["injected_flags"] = {"tier": fake.tier, "runner_class": runner_class.from_facts(
                "cpu", {"cpu_model": fake.model, "cores": fake.cores, "cpu_tier": fake.tier})}
        except ValueError as exc:
            out["injected_flags"] = {"error": str(exc)}
    return out | {"model": caps.model, "cores": caps.cores, "logical_cpus": os.cpu_count(),
            "machine": platform.machine(), "system": platform.system(),
            "memory_total_bytes": meminfo_bytes(host), "llc_bytes": last_level_cache_bytes(host),
            "flags": [f for f in FLAGS_OF_INTEREST if f in caps.flags], "tier": caps.tier, "runner_class": rc,
            **cpuid(text)}
