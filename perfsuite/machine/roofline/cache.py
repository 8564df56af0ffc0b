"""Cache residency of a decode step's working set, and the bandwidth it is compared with.

A CPU decode step that reads fewer bytes than the last-level cache holds (tiny-llama's 14 MB of float32 weights in
a 32 MiB L3) is served from that cache after the first step, so its share of the DRAM copy bandwidth says nothing
(it read 108 % of DRAM's peak). Such a cell is ``cache-resident``: its share is taken of a copy kernel over a
buffer pair that fits the LLC (measured at run start, like the DRAM copy), and a DRAM share is not reported.

Whatever the reference, a share above 100 % is not a share: it is left out (``None``) and
``bandwidth_above_peak`` says by how much and why (the byte count assumes each weight is read once from that
level of the hierarchy; part of the working set stayed in a faster one, or the reference under-measured).

``roofline_bound``: ``cache-resident`` or ``dram`` (CPU, by the LLC size), ``llc-unknown`` (CPU, no size read),
``device-memory`` (GPU). The LLC size is a parameter everywhere (tests inject it); at run start it is read from
sysfs by the doctor's reader (CPU 0's largest cache).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

CACHE_FRACTION = 4  # each buffer of the cache copy is LLC/4: the pair takes half the cache, leaving room for the rest


def llc_bytes_here() -> int | None:
    from perfsuite.machine.doctor import cpu
    from perfsuite.machine.doctor.host import Host

    return cpu.last_level_cache_bytes(Host())


def cache_copy_nbytes(llc_bytes: int) -> int:
    n = llc_bytes // CACHE_FRACTION
    return max(n - n % 4096, 64 * 2**10)


def measure_cache_bandwidth(llc_bytes: int, repeats: int = 30, min_sample_s: float = 0.0005,
                            budget_s: float = 0.5) -> Any:
    """Copy bandwidth within the last-level cache: ``dst.copy_(src)`` of LLC/4-byte buffers, ``k`` copies per sample
    (k chosen so one sample takes >= ``min_sample_s``), best sample after a warm-up; 2 x nbytes per copy, as the DRAM
    copy counts. At least ``repeats`` samples, and more until ``budget_s`` is spent: on a busy machine a descheduled
    OpenMP thread stalls a copy this small by a scheduler slice, and the best sample is one that ran undisturbed."""
    import torch

    from perfsuite.machine.roofline.core import Measured

    nbytes = cache_copy_nbytes(llc_bytes)
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)

    def timed() -> float:  # seconds for k copies
        t0 = time.perf_counter()
        for _ in range(k):
            dst.copy_(src)
        return time.perf_counter() - t0

    k = 1
    while timed() < min_sample_s and k < 1 << 20:  # warm-up, and the number of copies per sample
        k *= 2
    rates: list[float] = []
    end = time.perf_counter() + budget_s
    while len(rates) < repeats or (time.perf_counter() < end and len(rates) < 100 * repeats):
        rates.append(2 * nbytes * k / timed())
    return Measured(max(rates), statistics.median(rates), nbytes, len(rates),
                    f"torch copy_ of 2 x {nbytes / 2**20:.2f} MiB float32 (fits the {llc_bytes / 2**20:.0f} MiB LLC), "
                    f"{k} copies per sample, best of {len(rates)} ({torch.get_num_threads()} threads)")


def peaks(llc_bytes: int | None = None) -> dict[str, Any]:
    """The run-start cache references of a CPU: LLC size and the copy bandwidth within it."""
    llc = llc_bytes if llc_bytes is not None else llc_bytes_here()
    if not llc:
        return {"llc_bytes": None}
    m = measure_cache_bandwidth(llc)
    return {"llc_bytes": llc, "cache_copy_bandwidth_bytes_per_s": m.value, "cache_copy_bandwidth": m.as_dict()}


def bound(device: str, working_set_bytes: float, llc_bytes: int | None) -> str:
    if device != "cpu":
        return "device-memory"
    if not llc_bytes:
        return "llc-unknown"
    return "cache-resident" if working_set_bytes <= llc_bytes else "dram"


def share(achieved: float, reference: float | None, what: str, working_set_bytes: float,
          llc_bytes: int | None) -> tuple[float | None, dict[str, Any] | None]:
    """(share in [0, 1] or None, the ``bandwidth_above_peak`` record when achieved > reference)."""
    if reference is None or not reference or achieved != achieved:
        return None, None
    r = achieved / reference
    if r <= 1.0:
        return r, None
    where = (f"the {working_set_bytes / 1e6:.1f} MB working set partly stays in the {llc_bytes / 2**20:.0f} MiB LLC"
             if llc_bytes and what == "dram copy" else "part of the working set stays in a faster cache level")
    return None, {"ratio": r, "reference": what, "reason":
                  f"achieved {achieved / 1e9:.2f} GB/s is above the {what} bandwidth {reference / 1e9:.2f} GB/s: "
                  f"{where}, or the reference under-measured; no share is given"}


def decode_fields(device: str, achieved: float, working_set_bytes: float, *, dram_bytes_per_s: float | None,
                  cache_bytes_per_s: float | None, llc_bytes: int | None) -> dict[str, Any]:
    """The bandwidth keys of one cell's ``extra_info``: its bound, the reference it is measured against and its share
    of it (never above 1)."""
    b = bound(device, working_set_bytes, llc_bytes)
    stalled = bool(cache_bytes_per_s and dram_bytes_per_s and cache_bytes_per_s < dram_bytes_per_s)
    if b == "cache-resident":
        ref, what = (None if stalled else cache_bytes_per_s), "LLC copy"
    else:
        ref, what = dram_bytes_per_s, ("dram copy" if device == "cpu" else "device copy")
    eff, above = share(achieved, ref, what, working_set_bytes, llc_bytes)
    out: dict[str, Any] = {"roofline_bound": b, "llc_bytes": llc_bytes if device == "cpu" else None,
                           "bandwidth_reference": what if ref else None,
                           "measured_bandwidth_bytes_per_s": ref,
                           "measured_dram_bandwidth_bytes_per_s": dram_bytes_per_s,
                           "measured_cache_bandwidth_bytes_per_s": cache_bytes_per_s if device == "cpu" else None,
                           "bandwidth_efficiency_measured": eff, "bandwidth_above_peak": above}
    if b == "cache-resident" and stalled and cache_bytes_per_s and dram_bytes_per_s:
        out["bandwidth_note"] = (f"cache-resident, and the LLC copy measured {cache_bytes_per_s / 1e9:.2f} GB/s, below "
                                 f"the DRAM copy's {dram_bytes_per_s / 1e9:.2f} GB/s: the machine was busy when the run "
                                 "started (a descheduled thread stalls a copy this small); no share is given")
    elif b == "cache-resident" and ref is None:
        out["bandwidth_note"] = (f"cache-resident: the {working_set_bytes / 1e6:.1f} MB decode working set fits the "
                                 f"{(llc_bytes or 0) / 2**20:.0f} MiB LLC and no LLC copy bandwidth was measured; a "
                                 "share of DRAM bandwidth would be meaningless")
    return out


def pct(info: dict[str, Any]) -> str:
    """The run table's ``BW %``: the share ("38%", "38%c" against the LLC copy), "> peak", "cache" or "—"."""
    eff = info.get("bandwidth_efficiency_measured")
    if info.get("bandwidth_above_peak"):
        return "> peak"
    if isinstance(eff, (int, float)):
        return f"{eff:.0%}" + ("c" if info.get("roofline_bound") == "cache-resident" else "")
    return "cache" if info.get("roofline_bound") == "cache-resident" else "—"


def table_notes(infos: list[dict[str, Any]]) -> list[str]:
    """Footnotes of the run table for the cells whose BW % needs one."""
    out = []
    resident = [i for i in infos if i.get("roofline_bound") == "cache-resident"]
    if resident:
        llc = resident[0].get("llc_bytes") or 0
        out.append(f"BW %: 'c' / 'cache' = cache-resident: the decode working set fits the {llc / 2**20:.0f} MiB LLC, "
                   "so the share is of the LLC copy bandwidth measured at run start (none if it was not), not of DRAM")
    for i in infos:
        cell = (i.get("cell") or {}).get("id", "?")
        if i.get("bandwidth_above_peak"):
            out.append(f"BW %: > peak for {cell}: {i['bandwidth_above_peak']['reason']}")
        elif i.get("bandwidth_note") and "below the DRAM copy" in i["bandwidth_note"]:
            out.append(f"BW %: no share for {cell}: {i['bandwidth_note']}")
    return out


def share_text(info: dict[str, Any]) -> str:
    """The bandwidth share of one cell in words: "38.0% of measured LLC copy 120.00 GB/s [cache-resident]", or why
    there is none."""
    ref = info.get("measured_bandwidth_bytes_per_s")
    b = f" [{info['roofline_bound']}]" if info.get("roofline_bound") else ""
    if info.get("bandwidth_above_peak"):
        return f"> peak{b}: {info['bandwidth_above_peak']['reason']}"
    if info.get("bandwidth_efficiency_measured") is None or not ref:
        return f"no share{b}" + (f": {info['bandwidth_note']}" if info.get("bandwidth_note") else "")
    return f"{info['bandwidth_efficiency_measured']:.1%} of measured {info['bandwidth_reference']} {ref / 1e9:.2f} GB/s{b}"
