"""The ``amdsmi`` Python package (ROCm's library binding). ``import amdsmi`` without ROCm's ``libamd_smi.so``
raises KeyError (``KeyError: 'libamd_smi.so'``, pytorch/pytorch#188724), not ImportError, so every import of it
goes through :func:`load`."""

from __future__ import annotations

from typing import Any

from perfsuite.machine.doctor.amd_smi_cli import gpu_from_static
from perfsuite.machine.doctor.facts import Gpu, SourceResult, import_optional

NAME = "amdsmi"


def load() -> tuple[Any | None, str]:
    return import_optional("amdsmi", "amdsmi", "its ROCm library is missing or broken: install amd-smi-lib from "
                                               "ROCm or remove the amdsmi package")


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def read(mod: Any) -> list[Gpu]:
    gpus = []
    mod.amdsmi_init()
    try:
        for i, h in enumerate(mod.amdsmi_get_processor_handles()):
            asic = _call(mod.amdsmi_get_gpu_asic_info, h) or {}
            vram = _call(mod.amdsmi_get_gpu_vram_info, h) or {}
            driver = _call(mod.amdsmi_get_gpu_driver_info, h) or {}
            # The CLI's JSON is made from these dicts; older libraries name the size vram_size_mb.
            size = vram.get("vram_size", vram.get("vram_size_mb"))
            entry = {"gpu": i, "asic": asic, "vram": {"type": vram.get("vram_type"),
                                                      "size": {"value": size, "unit": "MB"} if size else None},
                     "driver": {"version": driver.get("driver_version")},
                     "bus": {"bdf": _call(mod.amdsmi_get_gpu_device_bdf, h)}}
            gpus.append(gpu_from_static(entry, i, NAME))
    finally:
        _call(mod.amdsmi_shut_down)
    return gpus


def probe() -> SourceResult:
    mod, why = load()
    if mod is None:
        return SourceResult(NAME, "absent" if "not installed" in why else "error", why)
    try:
        gpus = read(mod)
    except Exception as exc:
        return SourceResult(NAME, "error", f"{type(exc).__name__}: {exc}")
    return SourceResult.found(NAME, gpus)
