"""``nvidia-smi --query-gpu=... --format=csv,nounits``: columns are found by their header name, so any query
order parses (the header carries units in brackets, ``memory.total [MiB]``)."""

from __future__ import annotations

import csv
import io

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor._parse import tool_output
from perfsuite.machine.doctor.facts import Gpu, SourceResult
from perfsuite.machine.doctor.host import Host

NAME = "nvidia-smi"
QUERY = "index,name,memory.total,memory.used,driver_version,compute_cap"


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
        total = _mib(rec.get("memory.total"))
        arch = None
        cap = rec.get("compute_cap")
        if cap and "." in cap:
            major, minor = cap.split(".", 1)
            arch = gfx.sm_arch(int(major), int(minor))
        extra = {"vram_used_bytes": _mib(rec.get("memory.used"))} if rec.get("memory.used") else {}
        idx = rec.get("index")
        gpus.append(Gpu("nvidia", rec["name"], arch, total, rec.get("driver_version"),
                        int(idx) if idx and idx.isdigit() else len(gpus), NAME, extra))
    return gpus


def _mib(v: str | None) -> int | None:
    try:
        return int(float((v or "").replace("MiB", "").strip()) * 2**20)
    except ValueError:
        return None


def probe(host: Host) -> SourceResult:
    out = tool_output(host, NAME, "nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,nounits")
    if isinstance(out, SourceResult):
        return out
    try:
        gpus = parse_query(out)
    except ValueError as exc:
        return SourceResult(NAME, "error", f"{NAME}: malformed output, rejected: {exc}")
    return SourceResult(NAME, "ok" if gpus else "empty", "", gpus)
