"""What the doctor knows (GPUs, where each fact came from, findings with their fix), and what its sources share."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from perfsuite.machine.doctor.host import Host

# amd-smi and rocm-smi write "MB" for MiB (an MI300X reports 196592 MB = 192 GiB - 16 MiB).
_UNITS = {"B": 1, "KB": 2**10, "KIB": 2**10, "MB": 2**20, "MIB": 2**20, "GB": 2**30, "GIB": 2**30}


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


@dataclass
class SourceResult:
    """One probe: ``status`` is "ok" (gave devices), "empty" (ran, no devices), "absent" or "error"."""

    name: str
    status: str
    detail: str = ""
    gpus: list[Gpu] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def found(cls, name: str, gpus: list[Gpu], data: dict[str, Any] | None = None) -> SourceResult:
        return cls(name, "ok" if gpus else "empty", "", gpus, data or {})

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
        return asdict(self)


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


def json_document(text: str) -> Any:
    """The JSON document in a tool's stdout: the first line that starts with ``{`` or ``[`` and what follows.
    amd-smi under Python 3.14 prints ``SyntaxWarning`` lines first; without render-group access, a permission banner.
    """
    offset = 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith(("{", "[")):
            obj, _ = json.JSONDecoder().raw_decode(text[offset + len(line) - len(line.lstrip()):])
            return obj
        offset += len(line)
    raise ValueError("no JSON document in the output")


def value_bytes(v: Any) -> int | None:
    """``{"value": 196592, "unit": "MB"}`` / ``"65520 MB"`` / ``196592`` (MiB) -> bytes; None for "N/A"."""
    if isinstance(v, dict):
        num, unit = v.get("value"), str(v.get("unit", "MB"))
    elif isinstance(v, str) and len(v.split()) == 2:
        num, unit = v.split()
    else:
        num, unit = v, "MB"
    if num is None:
        return None
    try:
        return int(float(num) * _UNITS[unit.upper()])
    except (TypeError, ValueError, KeyError):
        return None


def clean(v: Any) -> Any:
    return None if v in (None, "", "N/A", "n/a") else v


def probe_tool(host: Host, name: str, cmd: tuple[str, ...], parse: Callable[[str], tuple[list[Gpu], dict[str, Any]]],
               *, last_line: bool = False, bad: Callable[[str, ValueError], SourceResult] | None = None
               ) -> SourceResult:
    """Source ``name`` from a command-line tool: "absent" when it is not installed; "error" when it failed, with the
    last line (``last_line``) or the last 200 characters of what it wrote; else ``parse`` of its stdout, a ValueError
    of which is a malformed output (or what ``bad`` makes of it)."""
    rc, out, err = host.command(*cmd)
    if rc == 127:
        return SourceResult(name, "absent", err)
    if rc != 0:
        said = (err or out).strip()
        detail = said.splitlines()[-1] if last_line and said else said[-200:]
        return SourceResult(name, "error", detail or f"exit {rc}")
    try:
        gpus, data = parse(out)
    except ValueError as exc:
        return bad(out, exc) if bad else SourceResult(name, "error", f"{name}: malformed output, rejected: {exc}")
    return SourceResult.found(name, gpus, data)
