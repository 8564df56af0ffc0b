"""Small helpers shared by the source parsers."""

from __future__ import annotations

import json
from typing import Any

from perfsuite.machine.doctor.facts import SourceResult
from perfsuite.machine.doctor.host import Host

# amd-smi and rocm-smi write "MB" for MiB (an MI300X reports 196592 MB = 192 GiB - 16 MiB).
_UNITS = {"B": 1, "KB": 2**10, "KIB": 2**10, "MB": 2**20, "MIB": 2**20, "GB": 2**30, "GIB": 2**30}


def json_document(text: str) -> Any:
    """The JSON document in a tool's stdout, skipping what some versions print before it.

    amd-smi under Python 3.14 prints ``SyntaxWarning`` lines first; without render-group access it prints a
    permission banner first. The document starts at the first line that starts with ``{`` or ``[``.
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
    elif isinstance(v, str):
        parts = v.split()
        num, unit = (parts[0], parts[1]) if len(parts) == 2 else (v, "MB")
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


def tool_output(host: Host, name: str, *cmd: str, last_line: bool = False) -> str | SourceResult:
    """The tool's stdout, or source ``name``'s "absent" / "error" result when it is not installed or failed; the
    error's detail is the last line (``last_line``) or the last 200 characters of what it wrote."""
    rc, out, err = host.command(*cmd)
    if rc == 127:
        return SourceResult(name, "absent", err)
    if rc != 0:
        said = (err or out).strip()
        detail = said.splitlines()[-1] if last_line and said else said[-200:]
        return SourceResult(name, "error", detail or f"exit {rc}")
    return out
