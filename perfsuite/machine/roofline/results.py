"""The roofline of each cell of a results file, after the fact: ``perfsuite roofline RESULTS.json``
(perfsuite.adapters.cli.roofline; perfsuite.machine.roofline.core re-exports :func:`annotate_results`)."""

from __future__ import annotations

from typing import Any

from perfsuite.facts.cells import cell_from_dict
from perfsuite.machine.roofline.core import annotate


def _model_config(cell_dict: dict[str, Any]) -> dict[str, Any]:
    import json
    from pathlib import Path

    from perfsuite.facts.models import PRESETS

    model_dir = cell_dict.get("model_dir")
    if model_dir and (Path(model_dir) / "config.json").is_file():
        return dict(json.loads((Path(model_dir) / "config.json").read_text()))
    if cell_dict["model"] in PRESETS:
        return dict(PRESETS[cell_dict["model"]].config)
    raise ValueError(f"{cell_dict['model']}: no config.json at {model_dir!r} and not a preset")


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
