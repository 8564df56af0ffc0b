"""GPU architecture names and the "will this build run on this device" decision table.

AMD: every tool spells the gfx arch differently. rocminfo and amd-smi say ``gfx90a`` (rocminfo's ISA line adds target
features, ``amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-``); KFD publishes ``gfx_target_version 90010`` (decimal
major*10000 + minor*100 + stepping, the minor and stepping then printed in hex); rocm-smi prints that same number
with a *decimal* stepping, ``gfx9010`` for gfx90a; ``HSA_OVERRIDE_GFX_VERSION`` takes ``major.minor.stepping``.
:func:`normalize` turns all of them into ``gfx90a``.

Whether code built for one arch runs on another follows LLVM's generic processor families
(https://llvm.org/docs/AMDGPUUsage.html, "AMDGPU Generic Processors"), so an ``HSA_OVERRIDE_GFX_VERSION`` inside a
family usually works and one across families loads instructions the device does not have. NVIDIA: a cubin for
``sm_XY`` runs on major X, minor >= Y (``torch.cuda._check_cubins``); PTX is JIT-compiled. docs/doctor.md,
"Predicting hipErrorNoBinaryForGpu", walks through the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# LLVM's generic processor families (AMDGPUUsage, "AMDGPU Generic Processors").
FAMILIES: dict[str, tuple[str, ...]] = {
    "gfx9-generic": ("gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"),
    "gfx9-4-generic": ("gfx940", "gfx941", "gfx942", "gfx950"),
    "gfx10-1-generic": ("gfx1010", "gfx1011", "gfx1012", "gfx1013"),
    "gfx10-3-generic": ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}
_FAMILY_OF = {arch: fam for fam, members in FAMILIES.items() for arch in members}

# Instinct / data-centre parts: AMD supports them without an override; an override there is never the fix.
DATACENTER = frozenset({"gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"})

# torch.cuda.get_arch_list() of PyTorch's ROCm wheels, as printed by their users (tests/unit/data/doctor/
# torch_rocm_arch_lists.txt names the threads): used to name a wheel that has the device's arch.
KNOWN_TORCH_ROCM_WHEELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("2.4.1+rocm6.0", "https://download.pytorch.org/whl/rocm6.0",
     ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030", "gfx1100", "gfx942")),
    ("2.5.1+rocm6.2", "https://download.pytorch.org/whl/rocm6.2",
     ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030", "gfx1100", "gfx942")),
    ("2.7.1+rocm6.3", "https://download.pytorch.org/whl/rocm6.3",
     ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1200",
      "gfx1201")),
    ("rocm7.2 wheel", "https://download.pytorch.org/whl/rocm7.2",
     ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1200",
      "gfx1201", "gfx950", "gfx1150", "gfx1151")),
)

_GFX = re.compile(r"gfx([0-9]+[0-9a-f]*)", re.I)
_TARGET_ID = re.compile(r"(?:amdgcn-amd-amdhsa--)?gfx([0-9a-f]+)(?::[a-z0-9+-]+)*$", re.I)


def _gfx(major: int, minor: int, step: int) -> str | None:
    """``gfx`` + major + minor and stepping as one hex digit each; None where either needs two."""
    return None if minor > 15 or step > 15 else f"gfx{major}{minor:x}{step:x}"


def from_target_version(value: int | str) -> str | None:
    """KFD's ``gfx_target_version`` (``90010``) -> ``gfx90a``; 0 (a CPU node) -> None."""
    v = int(value)
    return _gfx(v // 10000, (v // 100) % 100, v % 100) if v > 0 else None


def from_override(value: str) -> str | None:
    """``HSA_OVERRIDE_GFX_VERSION`` (``10.3.0``, ``9.0.10``) -> ``gfx1030`` / ``gfx90a``; None if malformed."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", value or "")
    if not m:
        return None
    major, minor, step = (int(x) for x in m.groups())
    return _gfx(major, minor, step) if major else None


def to_override(arch: str) -> str:
    """``gfx1030`` -> ``10.3.0``; the inverse of :func:`from_override`."""
    a = normalize(arch)
    if a is None:
        raise ValueError(f"not a gfx arch: {arch!r}")
    digits = a[3:]
    return f"{int(digits[:-2])}.{int(digits[-2], 16)}.{int(digits[-1], 16)}"


def normalize(name: str | int | None) -> str | None:
    """Any spelling of an AMD arch -> ``gfxNNN`` (lower case), or None: ``gfx90a``, ``gfx90a:sramecc+:xnack-``,
    ``amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-``, rocm-smi's ``gfx9010`` and KFD's ``90010`` all give ``gfx90a``."""
    if name is None:
        return None
    if isinstance(name, int) or name.strip().isdigit():
        return from_target_version(name)
    text = name.strip().lower()
    m = _TARGET_ID.search(text) or _GFX.search(text)
    if not m:
        return None
    digits = m.group(1)
    # rocm-smi renders gfx_target_version with a decimal stepping: 9.0.10 -> "gfx9010", 9.0.12 -> "gfx9012".
    # Real gfx9 names have three characters after "gfx", so four decimal digits starting with 9 are that form.
    if len(digits) == 4 and digits.isdigit() and digits[0] == "9":
        return _gfx(9, int(digits[1]), int(digits[2:]))
    return f"gfx{digits}"


def family(arch: str | None) -> str | None:
    return _FAMILY_OF.get(arch or "")


def same_isa(a: str, b: str) -> bool:
    """True if code built for ``b`` is meant to run on ``a``: the same arch, or both in one generic family."""
    return a == b or (family(a) is not None and family(a) == family(b))


def sm_arch(major: int, minor: int) -> str:
    return f"sm_{major}{minor}"


def parse_sm(arch: str) -> tuple[str, int, int] | None:
    """``sm_90`` -> ("sm", 9, 0); ``compute_37`` -> ("compute", 3, 7); ``sm_90a`` -> ("sm", 9, 0); ``sm_120``."""
    m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", arch.strip())
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


@dataclass(frozen=True)
class ArchVerdict:
    """What the decision table says for one device and one build."""

    status: str  # "ok" | "ok-override" | "no-binary" | "bad-override" | "unknown"
    blocking: bool
    message: str
    fix: str = ""
    effective_arch: str | None = None
    notes: tuple[str, ...] = ()


def wheel_with(arch: str) -> tuple[str, str] | None:
    """The oldest known PyTorch ROCm wheel whose arch list has ``arch``: (version, index URL)."""
    return next(((version, index) for version, index, archs in KNOWN_TORCH_ROCM_WHEELS if arch in archs), None)


def check_amd(device_arch: str, build_archs: list[str] | tuple[str, ...] | None, override: str | None,
              build: str = "torch") -> ArchVerdict:
    """The decision table: device gfx arch x the build's arch list x ``HSA_OVERRIDE_GFX_VERSION``; ``build_archs``
    None means the build's list is unknown (not a ROCm build, or the library does not say)."""
    dev = normalize(device_arch)
    if dev is None:
        return ArchVerdict("unknown", False, f"device arch {device_arch!r} is not a gfx arch")
    archs = sorted({a for a in (normalize(x) for x in build_archs or ()) if a})
    notes: list[str] = []
    effective = dev
    if override is not None and override.strip():
        target = from_override(override)
        if target is None:
            return ArchVerdict("bad-override", True,
                               f"HSA_OVERRIDE_GFX_VERSION={override!r} is not major.minor.stepping (e.g. 10.3.0)",
                               "unset HSA_OVERRIDE_GFX_VERSION", dev)
        if target == dev:
            notes.append(f"HSA_OVERRIDE_GFX_VERSION={override} names the device's own arch {dev}: it changes nothing; "
                         "unset it")
        elif not same_isa(dev, target):
            fix = "unset HSA_OVERRIDE_GFX_VERSION"
            cand = _override_candidate(dev, archs)
            if dev in DATACENTER:
                fix += f"; {dev} is supported without one"
            elif cand:
                fix += f"; the mapping for this device would be {to_override(cand)} ({cand}, same {family(dev)} family)"
            return ArchVerdict(
                "bad-override", True,
                f"HSA_OVERRIDE_GFX_VERSION={override} makes the runtime load {target} code objects on a {dev} device "
                f"({family(target) or target} vs {family(dev) or dev}: another instruction set) - kernels fault, "
                "hang or compute garbage", fix, target)
        else:
            effective = target
            notes.append(f"HSA_OVERRIDE_GFX_VERSION={override}: {dev} runs {target} code objects (same {family(dev)} "
                         "family); unsupported by AMD, recorded in machine_info")
    if build_archs is None:
        return ArchVerdict("unknown", False, f"{build}: no ROCm arch list to check {effective} against", "",
                           effective, tuple(notes))
    if effective in archs:
        return ArchVerdict("ok-override" if effective != dev else "ok", False, f"{build} has code objects for "
                           f"{effective}", "", effective, tuple(notes))
    # Predicted hipErrorNoBinaryForGpu.
    cand = _override_candidate(dev, archs) if effective == dev else None
    wheel = wheel_with(dev)
    fixes = [f"install a build that lists {dev}, e.g. torch {wheel[0]} (pip install torch --index-url {wheel[1]}) "
             "or the rocm/pytorch / rocm/vllm container" if wheel else
             f"install or build a {build} whose arch list has {dev} (from source: PYTORCH_ROCM_ARCH={dev})"]
    if cand:
        fixes.append(f"or, unsupported: export HSA_OVERRIDE_GFX_VERSION={to_override(cand)} (runs {cand} code on "
                     f"{dev}, same {family(dev)} family; perfsuite records it in machine_info)")
    return ArchVerdict("no-binary", True,
                       f"{build} has no code object for {effective} (it has {', '.join(archs) or 'none'}): expect "
                       "hipErrorNoBinaryForGpu / 'HIP error: invalid device function'",
                       "; ".join(fixes), effective, tuple(notes))


def _override_candidate(dev: str, archs: list[str]) -> str | None:
    """An arch of the build in the device's family (the family's first member preferred), for consumer parts."""
    members = () if dev in DATACENTER else FAMILIES.get(family(dev) or "", ())
    return next((m for m in members if m in archs and m != dev), None)


def check_nvidia(major: int, minor: int, build_archs: list[str] | tuple[str, ...] | None,
                 build: str = "torch") -> ArchVerdict:
    """Device compute capability x the build's ``get_arch_list()`` (``sm_XY`` cubins, ``compute_XY`` PTX)."""
    dev = sm_arch(major, minor)
    if build_archs is None:
        return ArchVerdict("unknown", False, f"{build}: no CUDA arch list to check {dev} against", "", dev)
    parsed = [p for p in (parse_sm(a) for a in build_archs) if p]
    cubins = [(M, m) for kind, M, m in parsed if kind == "sm"]
    ptx = [(M, m) for kind, M, m in parsed if kind == "compute"]
    if any(M == major and m <= minor for M, m in cubins):
        return ArchVerdict("ok", False, f"{build} has a cubin that runs on {dev}", "", dev)
    have = " ".join(build_archs) or "none"
    notes = (f"{build} has only PTX for {dev} (JIT-compiled at first use: slow start; torch itself warns "
             "'not compatible')",) if any((M, m) <= (major, minor) for M, m in ptx) else ()
    return ArchVerdict("no-binary", True,
                       f"{build} has no kernel image for {dev} (it has {have}): expect 'no kernel image is available "
                       "for execution on the device'",
                       f"install a {build} build whose arch list has sm_{major}x (for sm_{major}{minor}: a wheel from "
                       "https://download.pytorch.org/whl/ built with a CUDA that supports it)", dev, notes)
