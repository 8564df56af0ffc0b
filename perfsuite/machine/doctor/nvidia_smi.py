"""NVIDIA's two sources. NVML through ``pynvml`` (the nvidia-ml-py package): device name, memory, compute
capability, driver. ``nvidia-smi --query-gpu=... --format=csv,nounits``: columns are found by their header name, so
any query order parses (the header carries units in brackets, ``memory.total [MiB]``)."""

from __future__ import annotations

import csv
import io
from typing import Any

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Gpu, SourceResult, import_optional, probe_tool
from perfsuite.machine.doctor.host import Host

NAME = "nvidia-smi"
NVML = "nvml"
QUERY = "index,name,memory.total,memory.used,driver_version,compute_cap"


def load_nvml() -> tuple[Any | None, str]:
    return import_optional("pynvml", "pynvml (nvidia-ml-py)", "reinstall nvidia-ml-py, or check the NVIDIA driver's "
                                                              "libnvidia-ml.so")


def read_nvml(nv: Any) -> tuple[list[Gpu], dict[str, str]]:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    nv.nvmlInit()
    try:
        driver = text(nv.nvmlSystemGetDriverVersion())
        cuda = nv.nvmlSystemGetCudaDriverVersion()  # e.g. 12040
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
            gpus.append(Gpu("nvidia", text(nv.nvmlDeviceGetName(h)), gfx.sm_arch(major, minor),
                            int(nv.nvmlDeviceGetMemoryInfo(h).total), driver, i, NVML))
    finally:
        nv.nvmlShutdown()
    return gpus, {"nvidia_driver": driver, "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}"}


def probe_nvml() -> SourceResult:
    nv, why = load_nvml()
    if nv is None:
        return SourceResult(NVML, "absent", why)
    try:
        gpus, facts = read_nvml(nv)
    except Exception as exc:
        return SourceResult(NVML, "absent" if "NotFound" in type(exc).__name__ else "error",
                            f"{type(exc).__name__}: {exc}")
    return SourceResult.found(NVML, gpus, facts)


def parse_query(text: str) -> list[Gpu]:
    """ValueError for a row whose field count is not the header's (a truncated or garbled output), so a cut
    ``memory.total`` of "8" is never reported as a GPU with 8 MiB."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    header = [h.split(" [")[0].strip() for h in rows[0]]
    gpus: list[Gpu] = []
    for n, row in enumerate(rows[1:], 1):
        if not row:
            continue
        if len(row) != len(header):
            raise ValueError(f"row {n} has {len(row)} of {len(header)} fields (truncated output?)")
        rec = {h: v.strip() for h, v in zip(header, row, strict=True)}
        if not rec.get("name"):
            continue
        cap = rec.get("compute_cap")
        major, _, minor = (cap or "").partition(".")
        extra = {"vram_used_bytes": _mib(rec.get("memory.used"))} if rec.get("memory.used") else {}
        idx = rec.get("index")
        gpus.append(Gpu("nvidia", rec["name"], gfx.sm_arch(int(major), int(minor)) if cap and "." in cap else None,
                        _mib(rec.get("memory.total")), rec.get("driver_version"),
                        int(idx) if idx and idx.isdigit() else len(gpus), NAME, extra))
    return gpus


def _mib(v: str | None) -> int | None:
    try:
        return int(float((v or "").replace("MiB", "").strip()) * 2**20)
    except ValueError:
        return None


def probe(host: Host) -> SourceResult:
    return probe_tool(host, NAME, ("nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,nounits"),
                      lambda out: (parse_query(out), {}))
