"""The KFD topology in sysfs: ``/sys/class/kfd/kfd/topology/nodes/N/properties``. Readable without ROCm installed
and without any group membership, so it is the cheap source ``machine_facts`` uses. ``gfx_target_version``
appeared in the properties in later kernels (a 2018 RX 470 capture has none); then only the device id is known."""

from __future__ import annotations

import contextlib
from typing import Any

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Gpu, SourceResult
from perfsuite.machine.doctor.host import Host

NAME = "kfd-sysfs"
ROOT = "/sys/class/kfd/kfd/topology/nodes"
AMD_VENDOR_ID = 0x1002


def parse_properties(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            with contextlib.suppress(ValueError):
                out[parts[0]] = int(parts[1])
    return out


def gpu_from_properties(props: dict[str, int], index: int, vram_bytes: int | None = None) -> Gpu | None:
    """None for a CPU node (no SIMDs) or a non-AMD node."""
    if props.get("simd_count", 0) <= 0 or props.get("vendor_id", AMD_VENDOR_ID) != AMD_VENDOR_ID:
        return None
    arch = gfx.from_target_version(props["gfx_target_version"]) if props.get("gfx_target_version") else None
    extra: dict[str, Any] = {k: props[k] for k in ("device_id", "drm_render_minor", "gfx_target_version", "simd_count",
                                                   "num_xcc", "max_engine_clk_fcompute", "location_id", "domain")
                             if k in props}
    if props.get("simd_per_cu"):  # simd_count > 0: checked above
        extra["compute_units"] = props["simd_count"] // props["simd_per_cu"]
    return Gpu("amd", None, arch, vram_bytes, None, index, NAME, extra)


def read(host: Host, root: str = ROOT) -> list[Gpu]:
    gpus: list[Gpu] = []
    nodes = sorted(host.glob(f"{root}/*/properties"), key=lambda p: int(p.rstrip("/").split("/")[-2]))
    for path in nodes:
        text = host.read_text(path)
        if text is None:
            continue
        node_dir = path.rsplit("/", 1)[0]
        bank = host.read_text(f"{node_dir}/mem_banks/0/properties")
        vram = parse_properties(bank).get("size_in_bytes") if bank else None
        g = gpu_from_properties(parse_properties(text), len(gpus), vram)
        if g is not None:
            g.extra["kfd_node"] = int(node_dir.split("/")[-1])
            label = (host.read_text(f"{node_dir}/name") or "").strip()
            if label:
                g.extra["kfd_name"] = label
            gpus.append(g)
    return gpus


def probe(host: Host) -> SourceResult:
    if not host.exists(ROOT):
        return SourceResult(NAME, "absent", f"{ROOT} does not exist (no amdgpu/KFD driver loaded)")
    return SourceResult.found(NAME, read(host))
