"""``rocm-smi --showproductname --showmeminfo vram --showdriverversion --json`` (deprecated for amd-smi, still
shipped). Keys differ across versions ("Card series" / "Card Series"); "GFX Version" renders gfx90a as gfx9010."""

from __future__ import annotations

from typing import Any

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Gpu, SourceResult, clean, json_document, probe_tool
from perfsuite.machine.doctor.host import Host

NAME = "rocm-smi"
_NAME_KEYS = ("Device Name", "Card Series", "Card series", "Card Model", "Card model")


def _get(card: dict[str, Any], *keys: str) -> Any:
    return next((v for k in keys if (v := clean(card.get(k))) is not None), None)


def parse(text: str) -> tuple[list[Gpu], dict[str, str]]:
    """(GPUs in card order, system facts such as the driver version)."""
    doc = json_document(text)
    if not isinstance(doc, dict):
        raise ValueError("rocm-smi JSON is not an object")
    system = doc.get("system", {}) if isinstance(doc.get("system"), dict) else {}
    facts = {"driver": str(system["Driver version"])} if clean(system.get("Driver version")) else {}
    cards = sorted((k for k in doc if k.startswith("card") and k[4:].isdigit()), key=lambda k: int(k[4:]))
    gpus = []
    for key in cards:
        card = doc[key]
        total = _get(card, "VRAM Total Memory (B)", "GPU memory available")
        used = _get(card, "VRAM Total Used Memory (B)", "GPU memory use")
        gpus.append(Gpu("amd", _get(card, *_NAME_KEYS), gfx.normalize(_get(card, "GFX Version")),
                        int(total) if total is not None else None, facts.get("driver"), int(key[4:]), NAME,
                        {k: v for k, v in {"vram_used_bytes": int(used) if used is not None else None,
                                           "kfd_node": _get(card, "Node ID"), "sku": _get(card, "Card SKU"),
                                           "gfx_version_as_printed": _get(card, "GFX Version")}.items()
                         if v is not None}))
    return gpus, facts


def probe(host: Host) -> SourceResult:
    # Without a driver rocm-smi exits 0 and prints "WARNING: No JSON data to report": "empty", not an error.
    return probe_tool(host, NAME, ("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showdriverversion",
                                   "--json"), parse,
                      bad=lambda out, exc: SourceResult(NAME, "empty", f"{out.strip()[:120] or exc}"))
