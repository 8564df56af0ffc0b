"""``rocminfo``: HSA agents. GPU agents give the gfx arch (``Name: gfx90a``), marketing name, CUs and VRAM pool."""

from __future__ import annotations

import re

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Gpu, SourceResult, probe_tool
from perfsuite.machine.doctor.host import Host

NAME = "rocminfo"
_AGENT = re.compile(r"^\*+\s*\nAgent (\d+)\s*\n\*+\s*$", re.M)
_FIELD = re.compile(r"^  (\S[^:]*?):\s*(.*?)\s*$")
_KB = re.compile(r"^(\d+)\(0x[0-9a-f]+\)\s*KB$", re.I)


def parse_agents(text: str) -> list[dict[str, str]]:
    """One dict per agent: its top-level fields, plus ``_pools`` ("segment|size") and ``_isa`` (target ids)."""
    parts = _AGENT.split(text)
    agents = []
    for agent, body in zip(parts[1::2], parts[2::2], strict=True):
        fields: dict[str, str] = {"_agent": agent}
        pools: list[str] = []
        isas: list[str] = []
        segment = None
        for line in body.splitlines():
            m = _FIELD.match(line)
            if m:
                fields.setdefault(m.group(1), m.group(2))
                continue
            s = line.strip()
            if s.startswith("Segment:"):
                segment = s.split(":", 1)[1].strip()
            elif s.startswith("Size:") and segment is not None:
                pools.append(f"{segment}|{s.split(':', 1)[1].strip()}")
                segment = None
            elif s.startswith("Name:") and "amdgcn-amd-amdhsa" in s:
                isas.append(s.split(":", 1)[1].strip())
        fields["_pools"] = "\n".join(pools)
        fields["_isa"] = "\n".join(isas)
        agents.append(fields)
    return agents


def parse(text: str) -> list[Gpu]:
    """ValueError for an output that stops before rocminfo's closing ``*** Done ***`` (truncated): a GPU agent cut
    before its memory pools would otherwise be a device without VRAM."""
    if _AGENT.search(text) and not re.search(r"^\*+ Done \*+\s*$", text, re.M):
        raise ValueError("the output ends before rocminfo's closing '*** Done ***' line (truncated?)")
    gpus: list[Gpu] = []
    for a in parse_agents(text):
        if a.get("Device Type") != "GPU":
            continue
        pools = (pool.split("|", 1) for pool in a["_pools"].splitlines())  # (segment, size)
        vram = next((int(m.group(1)) * 1024 for segment, size in pools
                     if (m := _KB.match(size)) and "GLOBAL" in segment and "COARSE GRAINED" in segment), None)
        arch = gfx.normalize(a.get("Name"))
        isa = a["_isa"].splitlines()[0] if a["_isa"] else None
        gpus.append(Gpu("amd", a.get("Marketing Name"), arch, vram, None, len(gpus), NAME,
                        {"compute_units": _int(a.get("Compute Unit")), "kfd_node": _int(a.get("Node")),
                         "target_id": isa, "uuid": a.get("Uuid")}))
    return gpus


def kernel_driver(text: str) -> str | None:
    """``ROCk module version 6.10.5 is loaded`` (newer rocminfo) -> "6.10.5"."""
    m = re.search(r"ROCk module version (\S+) is loaded", text)
    return m.group(1) if m else None


def _int(v: str | None) -> int | None:
    try:
        return int(str(v).split("(")[0])
    except (TypeError, ValueError):
        return None


def probe(host: Host) -> SourceResult:
    return probe_tool(host, NAME, ("rocminfo",), lambda out: (parse(out), {"kernel_driver": kernel_driver(out)}),
                      last_line=True)
