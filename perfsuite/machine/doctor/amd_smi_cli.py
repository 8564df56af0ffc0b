"""``amd-smi static --json``: the ROCm 6 shape (a list, one object per GPU) and the ROCm 7 shape
(``{"gpu_data": [...]}``); ``amd-smi version --json`` for the ROCm version; ``amd-smi metric --csv`` for VRAM use."""

from __future__ import annotations

import contextlib
import csv
import io
from typing import Any

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Gpu, SourceResult, clean, json_document, probe_tool, value_bytes
from perfsuite.machine.doctor.host import Host

NAME = "amd-smi"


def gpu_entries(doc: Any) -> list[dict[str, Any]]:
    """The per-GPU objects of either shape."""
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]
    elif not isinstance(doc, list):
        raise ValueError("amd-smi JSON is neither a list nor an object with gpu_data")
    return [e for e in doc if isinstance(e, dict)]


def gpu_from_static(entry: dict[str, Any], index: int, source: str = NAME) -> Gpu:
    """One GPU from an ``amd-smi static`` object (the same keys amdsmi's Python API returns)."""
    # A block is "N/A" where the query is unsupported.
    asic, board, vram, driver, bus = (v if isinstance(v := entry.get(k), dict) else {}
                                      for k in ("asic", "board", "vram", "driver", "bus"))
    idx = entry.get("gpu", index)
    extra = {"compute_units": clean(asic.get("num_compute_units")), "device_id": clean(asic.get("device_id")),
             "bdf": clean(bus.get("bdf")), "vram_type": clean(vram.get("type"))}
    return Gpu("amd", clean(asic.get("market_name")) or clean(board.get("product_name")),
               gfx.normalize(clean(asic.get("target_graphics_version"))), value_bytes(vram.get("size")),
               clean(driver.get("version")), idx if isinstance(idx, int) else index, source,
               {k: v for k, v in extra.items() if v is not None})


def parse_static(text: str) -> list[Gpu]:
    return [gpu_from_static(e, i) for i, e in enumerate(gpu_entries(json_document(text)))]


def parse_version(text: str) -> dict[str, str]:
    """``amd-smi version --json`` -> {"rocm": ..., "amdgpu": ...}; error strings (no access) are dropped."""
    doc = json_document(text)
    entry = doc[0] if isinstance(doc, list) and doc else doc if isinstance(doc, dict) else {}
    versions = {name: clean(entry.get(key)) for key, name in
                (("rocm_version", "rocm"), ("amdgpu_version", "amdgpu"), ("amdsmi_library_version", "amdsmi"))}
    return {k: v for k, v in versions.items() if isinstance(v, str) and "AMDSMI_STATUS" not in v}


def parse_metric_csv(text: str) -> dict[int, tuple[int | None, int | None]]:
    """``amd-smi metric --csv`` -> {gpu: (used_vram_bytes, total_vram_bytes)} (the CSV's MB are MiB)."""
    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            out[int(row["gpu"])] = (value_bytes(clean(row.get("used_vram"))), value_bytes(clean(row.get("total_vram"))))
    return out


def probe(host: Host) -> SourceResult:
    def parse(out: str) -> tuple[list[Gpu], dict[str, Any]]:
        gpus = parse_static(out)
        data: dict[str, Any] = {}
        if "Permission needed" in out or "Permission denied" in out:
            data["permission_banner"] = out.strip().splitlines()[0]
        rc, vout, _ = host.command("amd-smi", "version", "--json")
        if rc == 0:
            with contextlib.suppress(ValueError):
                data.update(parse_version(vout))
        return gpus, data

    return probe_tool(host, NAME, ("amd-smi", "static", "--json"), parse, last_line=True,
                      bad=lambda out, exc: SourceResult(NAME, "error", f"unreadable output: {exc}"))
