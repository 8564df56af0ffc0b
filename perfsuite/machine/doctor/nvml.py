"""NVML through ``pynvml`` (the nvidia-ml-py package): device name, memory, compute capability, driver."""

from __future__ import annotations

from typing import Any

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Gpu, SourceResult, import_optional

NAME = "nvml"


def load() -> tuple[Any | None, str]:
    return import_optional("pynvml", "pynvml (nvidia-ml-py)", "reinstall nvidia-ml-py, or check the NVIDIA driver's "
                                                              "libnvidia-ml.so")


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def read(nv: Any) -> tuple[list[Gpu], dict[str, str]]:
    nv.nvmlInit()
    try:
        driver = _str(nv.nvmlSystemGetDriverVersion())
        cuda = nv.nvmlSystemGetCudaDriverVersion()  # e.g. 12040
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
            gpus.append(Gpu("nvidia", _str(nv.nvmlDeviceGetName(h)), gfx.sm_arch(major, minor),
                            int(nv.nvmlDeviceGetMemoryInfo(h).total), driver, i, NAME))
    finally:
        nv.nvmlShutdown()
    return gpus, {"nvidia_driver": driver, "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}"}


def probe() -> SourceResult:
    nv, why = load()
    if nv is None:
        return SourceResult(NAME, "absent", why)
    try:
        gpus, facts = read(nv)
    except Exception as exc:
        return SourceResult(NAME, "absent" if "NotFound" in type(exc).__name__ else "error",
                            f"{type(exc).__name__}: {exc}")
    return SourceResult(NAME, "ok" if gpus else "empty", "", gpus, facts)
