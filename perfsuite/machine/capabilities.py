"""What the CPU can run: architecture, model, instruction-set flags, cores, and the *tier* that decides its kernels.

The one source of CPU facts for the runner class, the known operator gaps and a run's ``machine_info``. Every
decision that depends on the hardware takes a :class:`CpuCapabilities`, so a test decides as an AVX2-only EPYC, a
Skylake or a Neoverse would by passing one.

**Tier**: the highest rung of the instruction-set ladder the CPU's kernels dispatch on, modelled on oneDNN's ISA
hierarchy and on what ONNX Runtime's MLAS and PyTorch's ATen dispatch on (their avx2 / avx512 / VNNI / AMX kernels):
:data:`X86_TIERS` above ``sse``; ``avx2vnni`` is AVX2 with VNNI (Alder Lake, the E-core Xeon 6), whose int8 kernels
differ from plain AVX2's. On aarch64 (``Features``, :data:`ARM_TIERS` above ``aarch64``) the vector ISA comes first
because it decides the fp32/bf16 GEMM kernels of oneDNN/ACL and KleidiAI (SVE: Neoverse V1/V2/N2, Graviton 3/4);
among NEON-only machines (Neoverse N1, Ampere Altra, Apple M1/M2) the int8 dot-product extensions decide the
quantized kernels; SVE2 parts (Armv9) always carry i8mm. Any other architecture: its name (``ppc64le``).

**Test hook**: ``PERFSUITE_CPU_FLAGS`` (space or comma separated /proc/cpuinfo flag names) replaces the flags this
CPU reports. It changes *decisions* only (the runner class, which known gaps apply) and never which kernels run; a
run under it is marked (``cpu_flags_injected``) and cannot record a baseline.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ENV_FLAGS = "PERFSUITE_CPU_FLAGS"
ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
X86_TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("amx", ("amx_tile", "amx_bf16", "amx_int8")), ("avx512vnni", ("avx512_vnni",)), ("avx512", ("avx512f",)),
    ("avx2vnni", ("avx_vnni",)), ("avx2", ("avx2",)))
ARM_TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sme", ("sme", "sme2")), ("sve2", ("sve2",)), ("sve", ("sve",)), ("i8mm", ("i8mm",)), ("dotprod", ("asimddp",)),
    ("neon", ("asimd",)))
TIERS = {"x86_64": (X86_TIERS, "sse"), "aarch64": (ARM_TIERS, "aarch64")}
_FLAG = re.compile(r"^[a-z0-9_]+$")
# aarch64 /proc/cpuinfo has no "model name": (CPU implementer, CPU part) of common server cores, as lscpu names them.
ARM_PARTS = {("0x41", "0xd0c"): "ARM Neoverse-N1", ("0x41", "0xd40"): "ARM Neoverse-V1",
             ("0x41", "0xd49"): "ARM Neoverse-N2", ("0x41", "0xd4f"): "ARM Neoverse-V2",
             ("0x41", "0xd8e"): "ARM Neoverse-N3", ("0x41", "0xd84"): "ARM Neoverse-V3",
             ("0xc0", "0xac3"): "Ampere AmpereOne", ("0x46", "0x001"): "Fujitsu A64FX"}


def normalise_arch(machine: str) -> str:
    m = machine.lower()
    return ARCH_ALIASES.get(m, m)


def tier(arch: str, flags: Iterable[str]) -> str:
    """The instruction-set tier of a CPU of ``arch`` with ``flags`` (see the module docstring for the ladders)."""
    arch = normalise_arch(arch)
    have = set(flags)
    ladder, floor = TIERS.get(arch, ((), re.sub(r"[^a-z0-9]+", "", arch) or "unknown"))
    return next((name for name, any_of in ladder if have.intersection(any_of)), floor)


@dataclass(frozen=True)
class CpuCapabilities:
    """One CPU as the decisions see it. Build one by hand in tests; :func:`detect` reads this machine's."""

    arch: str  # normalised: x86_64, aarch64, ...
    model: str
    flags: frozenset[str]
    cores: int
    injected: bool = False  # flags came from PERFSUITE_CPU_FLAGS, not from the CPU

    @property
    def tier(self) -> str:
        return tier(self.arch, self.flags)

    def facts(self) -> dict[str, Any]:
        """What a run records about the CPU (``machine_info.perfsuite``)."""
        out: dict[str, Any] = {"cpu_arch": self.arch, "cpu_tier": self.tier, "cpu_flags": sorted(self.flags)}
        if self.injected:
            out["cpu_flags_injected"] = ENV_FLAGS
        return out

    def describe(self) -> str:
        """``x86_64/avx2`` (plus a note when the flags are injected): the feature set, as messages name it."""
        return f"{self.arch}/{self.tier}" + (f" (flags injected by {ENV_FLAGS})" if self.injected else "")


def parse_cpuinfo(text: str) -> tuple[str | None, frozenset[str]]:
    """(model name, flags) of the first processor in /proc/cpuinfo text; x86 ``flags``, aarch64 ``Features``."""
    first: dict[str, str] = {}  # each key's first value
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        first.setdefault("flags" if key == "Features" else key, value.strip())
    model = first.get("model name")
    if model is None:  # aarch64: named by (implementer, part)
        model = ARM_PARTS.get((first.get("CPU implementer", "").lower(), first.get("CPU part", "").lower()))
    return model, frozenset(first.get("flags", "").split())


def flags_from_env(value: str) -> frozenset[str]:
    """The flags of ``PERFSUITE_CPU_FLAGS``; ValueError naming the variable, the value and the fix."""
    tokens = [t for t in re.split(r"[\s,]+", value) if t]
    if not tokens:
        raise ValueError(f"{ENV_FLAGS} is set but empty; unset it to use this CPU's flags, or list flag names, e.g. "
                         f"{ENV_FLAGS}='sse4_2 avx avx2 fma'")
    bad = [t for t in tokens if not _FLAG.match(t)]
    if bad:
        raise ValueError(f"{ENV_FLAGS}: {bad[0]!r} is not a /proc/cpuinfo flag name (lowercase letters, digits, '_'); "
                         f"write e.g. {ENV_FLAGS}='sse4_2 avx avx2 fma'")
    return frozenset(tokens)


def installed(dists: Iterable[str]) -> dict[str, str]:
    """Distribution -> version of those of ``dists`` that are installed, in ``dists``' order."""
    out = {}
    for dist in dists:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def first_installed(dists: Iterable[str]) -> tuple[str, str] | None:
    """(distribution, version) of the first of ``dists`` that is installed, or None."""
    return next(iter(installed(dists).items()), None)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def detect(cpuinfo: str | None = None, env: Mapping[str, str] | None = None, machine: str | None = None,
           cores: int | None = None) -> CpuCapabilities:
    """This machine's CPU (each argument replaces what would be read: /proc/cpuinfo's text, the environment, the
    architecture, the usable cores). Raises ValueError for a malformed ``PERFSUITE_CPU_FLAGS``."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf8", errors="replace")
        except OSError:
            cpuinfo = ""
    model, flags = parse_cpuinfo(cpuinfo)
    arch = normalise_arch(machine or platform.machine())
    env = os.environ if env is None else env
    injected = env.get(ENV_FLAGS)
    if injected is not None:
        flags = flags_from_env(injected)
    return CpuCapabilities(arch, model or platform.processor() or arch, flags,
                           cpu_count() if cores is None else cores, injected is not None)


def from_machine_info(machine_info: Mapping[str, Any]) -> CpuCapabilities | None:
    """The CPU a stored run recorded (pytest-benchmark's ``machine_info``): perfsuite's own ``cpu_flags`` if the run
    has them, else the union of py-cpuinfo's flags (``machine_info.cpu.flags``) and the doctor's. None if the run
    recorded no flags at all."""
    def table(m: Any, key: str) -> Mapping[str, Any]:
        v = m.get(key) if isinstance(m, Mapping) else None
        return v if isinstance(v, Mapping) else {}

    ps, cpu = table(machine_info, "perfsuite"), table(machine_info, "cpu")
    doctor_cpu = table(table(ps, "doctor"), "cpu")
    own = ps.get("cpu_flags")
    sources = [own] if isinstance(own, list) else [cpu.get("flags"), doctor_cpu.get("flags")]
    flags = {str(f) for source in sources if isinstance(source, list) for f in source}
    if not flags:
        return None
    arch = ps.get("cpu_arch") or cpu.get("arch_string_raw") or machine_info.get("machine") or ""
    return CpuCapabilities(normalise_arch(str(arch)), str(ps.get("cpu_model") or cpu.get("brand_raw") or ""),
                           frozenset(flags), int(ps.get("cores") or cpu.get("count") or 0))
