"""How close a cell runs to the hardware's limit (the model's byte and FLOP counts: perfsuite.facts.model_shape);
docs/doctor.md ("Roofline efficiency") gives the conventions, the keys and the checked figures. Decode is memory-bound
(bytes per step over the step time, against the copy bandwidth), prefill compute-bound (useful FLOPs over TTFT,
against the matmul peak). A CPU decode working set that fits the last-level cache is served from it after the first
step (tiny-llama's 14 MB in a 32 MiB L3 read 108 % of DRAM's peak): it is ``cache-resident``, compared with a copy
within the LLC. A share above 100 % is not a share: it is left out and ``bandwidth_above_peak`` says why.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from perfsuite.facts import model_shape as ms
from perfsuite.facts.cells import cell_from_dict
from perfsuite.machine.roofline.datasheet import datasheet


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b or math.isnan(a) else a / b


def annotate(cell: Any, model_config: dict[str, Any], aggregates: dict[str, Any],
             bandwidth_bytes_per_s: float | None, *, device_name: str | None = None,
             matmul_flops_per_s: float | None = None, llc_bytes: int | None = None,
             cache_bandwidth_bytes_per_s: float | None = None) -> dict[str, Any]:
    """``extra_info`` keys of one cell (a :class:`perfsuite.facts.cells.Cell`): decode bytes/step, achieved bandwidth
    and its shares (from ``median_itl_ms``, else ``median_tpot_ms``), and prefill FLOP/s against the peaks (from
    ``median_ttft_ms``). Keys whose inputs are missing are left out; ratios without a reference are None; a CPU cell
    whose working set fits ``llc_bytes`` is compared with ``cache_bandwidth_bytes_per_s`` (:func:`decode_fields`)."""
    shape = ms.ModelShape.from_config(model_config)
    sc = cell.scenario
    tp = max(1, int(getattr(cell, "tensor_parallel_size", 1)))
    device = getattr(cell, "device", "cpu")
    spec = datasheet(device_name) if device != "cpu" else None
    out: dict[str, Any] = {"model_params": shape.total_params()}
    if spec:
        out.update(datasheet_device=spec.name, datasheet_source=spec.source)
    # The median decode step (robust to the outliers a shared machine adds to per-generation means); its context
    # is the median of a uniform walk, i.e. the mean context the byte count uses.
    tpot = aggregates.get("median_itl_ms") or aggregates.get("median_tpot_ms")
    if tpot:
        ctx = sc.prompt_tokens + sc.new_tokens / 2  # the steps attend over prompt+1 ... prompt+new-1 positions
        w = ms.weight_bytes_per_step(shape, cell.dtype, sc.batch_size, cell.quantization)
        kv = ms.kv_cache_bytes(shape, cell.dtype, sc.batch_size, ctx)
        achieved = (w + kv) / tp / (tpot / 1e3)
        sheet_bw = spec.bandwidth_bytes_per_s if spec else None
        out.update({
            "roofline_step_ms": tpot, "decode_context_tokens": ctx, "decode_weight_bytes": w,
            "decode_kv_cache_bytes_per_step": kv, "decode_bytes_per_step": w + kv,
            "decode_flops_per_step": ms.decode_flops_per_step(shape, sc.batch_size, ctx),
            "achieved_bandwidth_bytes_per_s": achieved,
            # CPU ranks share the socket's LLC: the whole working set decides residency
            **decode_fields(device, achieved, w + kv, dram_bytes_per_s=bandwidth_bytes_per_s,
                            cache_bytes_per_s=cache_bandwidth_bytes_per_s, llc_bytes=llc_bytes),
            "datasheet_bandwidth_bytes_per_s": sheet_bw,
            "bandwidth_efficiency_datasheet": share(achieved, sheet_bw, "datasheet", w + kv, None)[0],
        })
    ttft = aggregates.get("median_ttft_ms")
    if ttft:
        flops = ms.prefill_flops(shape, sc.batch_size, sc.prompt_tokens) / tp
        achieved_f = flops / (ttft / 1e3)
        peak = spec.peak_flops_per_s.get(cell.dtype) if spec else None
        out.update({"prefill_flops": flops * tp, "achieved_prefill_flops_per_s": achieved_f,
                    "measured_matmul_flops_per_s": matmul_flops_per_s,
                    "prefill_flops_efficiency_measured": _ratio(achieved_f, matmul_flops_per_s),
                    "datasheet_peak_flops_per_s": peak, "prefill_flops_efficiency_datasheet": _ratio(achieved_f, peak)})
    return out


def bound(device: str, working_set_bytes: float, llc_bytes: int | None) -> str:
    if device != "cpu":
        return "device-memory"
    if not llc_bytes:
        return "llc-unknown"
    return "cache-resident" if working_set_bytes <= llc_bytes else "dram"


def share(achieved: float, reference: float | None, what: str, working_set_bytes: float,
          llc_bytes: int | None) -> tuple[float | None, dict[str, Any] | None]:
    """(share in [0, 1] or None, the ``bandwidth_above_peak`` record when achieved > reference)."""
    if not reference or math.isnan(achieved):
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
    cpu = device == "cpu"
    stalled = bool(cache_bytes_per_s and dram_bytes_per_s and cache_bytes_per_s < dram_bytes_per_s)
    if b == "cache-resident":
        ref, what = (None if stalled else cache_bytes_per_s), "LLC copy"
    else:
        ref, what = dram_bytes_per_s, ("dram copy" if cpu else "device copy")
    eff, above = share(achieved, ref, what, working_set_bytes, llc_bytes)
    out: dict[str, Any] = {"roofline_bound": b, "llc_bytes": llc_bytes if cpu else None,
                           "bandwidth_reference": what if ref else None, "measured_bandwidth_bytes_per_s": ref,
                           "measured_dram_bandwidth_bytes_per_s": dram_bytes_per_s,
                           "measured_cache_bandwidth_bytes_per_s": cache_bytes_per_s if cpu else None,
                           "bandwidth_efficiency_measured": eff, "bandwidth_above_peak": above}
    if b == "cache-resident" and stalled and cache_bytes_per_s and dram_bytes_per_s:
        out["bandwidth_note"] = (f"cache-resident, and the LLC copy measured {cache_bytes_per_s / 1e9:.2f} GB/s, "
                                 f"below the DRAM copy's {dram_bytes_per_s / 1e9:.2f} GB/s: the machine was busy when "
                                 "the run started (a descheduled thread stalls a copy this small); no share is given")
    elif b == "cache-resident" and ref is None:
        out["bandwidth_note"] = (f"cache-resident: the {working_set_bytes / 1e6:.1f} MB decode working set fits the "
                                 f"{(llc_bytes or 0) / 2**20:.0f} MiB LLC and no LLC copy bandwidth was measured; a "
                                 "share of DRAM bandwidth would be meaningless")
    return out


def pct(info: dict[str, Any]) -> str:
    """The run table's ``BW %``: the share ("38%", "38%c" against the LLC copy), "> peak", "cache" or "—"."""
    eff = info.get("bandwidth_efficiency_measured")
    resident = info.get("roofline_bound") == "cache-resident"
    if info.get("bandwidth_above_peak"):
        return "> peak"
    if isinstance(eff, (int, float)):
        return f"{eff:.0%}" + ("c" if resident else "")
    return "cache" if resident else "—"


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
    return (f"{info['bandwidth_efficiency_measured']:.1%} of measured {info['bandwidth_reference']} "
            f"{ref / 1e9:.2f} GB/s{b}")


# ------------------------------------------------------------------------------- a results file, after the fact
def _model_config(cell_dict: dict[str, Any]) -> dict[str, Any]:
    from perfsuite.facts.models import PRESETS

    config = Path(cell_dict.get("model_dir") or "") / "config.json"
    if cell_dict.get("model_dir") and config.is_file():
        return dict(json.loads(config.read_text()))
    if cell_dict["model"] in PRESETS:
        return dict(PRESETS[cell_dict["model"]].config)
    raise ValueError(f"{cell_dict['model']}: no config.json at {cell_dict.get('model_dir')!r} and not a preset")


def recorded(results: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a results file's ``machine_info.perfsuite`` recorded: (the doctor's ``cpu``, ``roofline``), {} if absent."""
    mi = (results.get("machine_info") or {}).get("perfsuite") or {}
    return ((mi.get("doctor") or {}).get("cpu") or {}), (mi.get("roofline") or {})


def annotate_results(results: dict[str, Any], bandwidth_bytes_per_s: float | None,
                     matmul_flops_per_s: float | None = None, device_name: str | None = None,
                     llc_bytes: int | None = None, cache_bandwidth_bytes_per_s: float | None = None,
                     ) -> list[dict[str, Any]]:
    """:func:`annotate` for every benchmark of a pytest-benchmark JSON (``perfsuite run --json``). The LLC size and
    cache bandwidth default to what the file's ``machine_info`` recorded (the machine that ran it)."""
    doctor_cpu, roofline = recorded(results)
    if llc_bytes is None:
        llc_bytes = doctor_cpu.get("llc_bytes") or roofline.get("llc_bytes")
    if cache_bandwidth_bytes_per_s is None:
        cache_bandwidth_bytes_per_s = roofline.get("cache_copy_bandwidth_bytes_per_s")
    rows = []
    for b in results.get("benchmarks", []):
        info = b.get("extra_info", {})
        if "cell" not in info:
            continue
        cell = cell_from_dict(info["cell"])
        extra = annotate(cell, _model_config(info["cell"]), info, bandwidth_bytes_per_s, device_name=device_name,
                         matmul_flops_per_s=matmul_flops_per_s, llc_bytes=llc_bytes,
                         cache_bandwidth_bytes_per_s=cache_bandwidth_bytes_per_s)
        rows.append({"test": b.get("name"), "cell": cell.id, "metric": info.get("metric"), **extra,
                     "median_tpot_ms": info.get("median_tpot_ms"), "median_ttft_ms": info.get("median_ttft_ms")})
    return rows
