"""torch's view: the build (HIP / CUDA / CPU), ``torch.cuda.get_arch_list()`` and the devices it sees."""

from __future__ import annotations

from typing import Any

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Gpu, SourceResult

NAME = "torch"


def build_info(torch: Any) -> dict[str, Any]:
    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    kind = "rocm" if hip else "cuda" if cuda else "cpu"
    try:
        arch_list = list(torch.cuda.get_arch_list()) if kind != "cpu" else []
    except Exception:
        arch_list = []
    return {"version": torch.__version__, "kind": kind, "hip": hip, "cuda": cuda, "arch_list": arch_list}


def devices(torch: Any) -> list[Gpu]:
    gpus: list[Gpu] = []
    if not torch.cuda.is_available():
        return gpus
    hip = bool(getattr(torch.version, "hip", None))
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        arch = gfx.normalize(getattr(p, "gcnArchName", None)) if hip else gfx.sm_arch(p.major, p.minor)
        gpus.append(Gpu("amd" if hip else "nvidia", p.name, arch, int(p.total_memory), None, i, NAME,
                        {"target_id": getattr(p, "gcnArchName", None)} if hip else {}))
    return gpus


def probe() -> SourceResult:
    try:
        import torch
    except ImportError as exc:
        return SourceResult(NAME, "absent", f"torch not installed ({exc})")
    info = build_info(torch)
    try:
        gpus = devices(torch)
    except Exception as exc:
        return SourceResult(NAME, "error", f"{type(exc).__name__}: {exc}", [], {"build": info})
    return SourceResult(NAME, "ok" if gpus else "empty", "", gpus, {"build": info})
