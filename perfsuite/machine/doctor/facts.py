"""What the doctor knows: GPUs, where each fact came from, and findings with their fix."""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Gpu:
    vendor: str  # "amd" | "nvidia"
    name: str | None = None  # marketing name
    arch: str | None = None  # gfx90a | sm_90
    vram_bytes: int | None = None
    driver: str | None = None
    index: int | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def merge(self, other: Gpu) -> None:
        """Fill the fields this source did not give from another source's view of the same device."""
        for f in ("name", "arch", "vram_bytes", "driver"):
            if getattr(self, f) in (None, "", "N/A"):
                setattr(self, f, getattr(other, f))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SourceResult:
    """One probe: ``status`` is "ok" (gave devices), "empty" (ran, no devices), "absent" or "error"."""

    name: str
    status: str
    detail: str = ""
    gpus: list[Gpu] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "devices": len(self.gpus)}


@dataclass(frozen=True)
class Finding:
    level: str  # "ok" | "info" | "warn" | "error" (blocking: the doctor exits 1)
    topic: str  # "device" | "arch" | "override" | "access" | "runtime" | "build"
    message: str
    fix: str = ""

    @property
    def blocking(self) -> bool:
        return self.level == "error"

    def as_dict(self) -> dict[str, Any]:
        return {"level": self.level, "topic": self.topic, "message": self.message, "fix": self.fix}


def import_optional(module: str, label: str, broken_fix: str) -> tuple[Any | None, str]:
    """(module, "") or (None, why) for a vendor binding. Besides ImportError, a binding whose native library is
    missing raises KeyError, OSError or AttributeError at import (``amdsmi``: ``KeyError: 'libamd_smi.so'``); that is
    reported with ``broken_fix``."""
    try:
        return importlib.import_module(module), ""
    except ImportError as exc:
        return None, f"{label} not installed ({exc})"
    except (KeyError, OSError, AttributeError) as exc:
        return None, f"{label} is installed but broken ({type(exc).__name__}: {exc}); {broken_fix}"
