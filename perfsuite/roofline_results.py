"""The roofline of each cell of a results file, after the fact: ``perfsuite roofline RESULTS.json``
(perfsuite.commands.roofline; perfsuite.roofline re-exports :func:`annotate_results`)."""

from __future__ import annotations

from typing import Any

from perfsuite.cells import cell_from_dict
from perfsuite.roofline import annotate, measure_copy_bandwidth, measure_matmul_flops


def _model_config(cell_dict: dict[str, Any]) -> dict[str, Any]:
    import json
    from pathlib import Path

    from perfsuite.models import PRESETS

    model_dir = cell_dict.get("model_dir")
    if model_dir and (Path(model_dir) / "config.json").is_file():
        return dict(json.loads((Path(model_dir) / "config.json").read_text()))
    if cell_dict["model"] in PRESETS:
        return dict(PRESETS[cell_dict["model"]].config)
    raise ValueError(f"{cell_dict['model']}: no config.json at {model_dir!r} and not a preset")


def annotate_results(results: dict[str, Any], bandwidth_bytes_per_s: float | None,
                     matmul_flops_per_s: float | None = None, device_name: str | None = None,
                     llc_bytes: int | None = None, cache_bandwidth_bytes_per_s: float | None = None,
                     ) -> list[dict[str, Any]]:
    """:func:`annotate` for every benchmark of a pytest-benchmark JSON (``perfsuite run --json``). The LLC size and
    cache bandwidth default to what the file's ``machine_info`` recorded (the machine that ran it)."""
    mi = (results.get("machine_info") or {}).get("perfsuite") or {}
    if llc_bytes is None:
        llc_bytes = ((mi.get("doctor") or {}).get("cpu") or {}).get("llc_bytes") or \
            (mi.get("roofline") or {}).get("llc_bytes")
    if cache_bandwidth_bytes_per_s is None:
        cache_bandwidth_bytes_per_s = (mi.get("roofline") or {}).get("cache_copy_bandwidth_bytes_per_s")
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


def add_arguments(p: Any) -> None:
    """The arguments of ``perfsuite roofline`` (perfsuite.commands.roofline)."""
    from pathlib import Path

    p.add_argument("results", type=Path, help="a pytest-benchmark JSON file written by perfsuite")
    p.add_argument("--bandwidth", type=float, default=None, help="bytes/s (default: measure the CPU copy now)")
    p.add_argument("--flops", type=float, default=None, help="FLOP/s (default: measure a CPU matmul now)")
    p.add_argument("--device-name", default=None, help="for the datasheet figures of a GPU run")
    p.add_argument("--llc-bytes", type=int, default=None,
                   help="last-level cache size (default: the file's, else this CPU's)")
    p.add_argument("--cache-bandwidth", type=float, default=None,
                   help="bytes/s within the LLC (default: the file's, else measured now with --bandwidth unset)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def run(a: Any) -> int:
    """The roofline of each cell in the results file ``a.results``; without ``a.bandwidth`` / ``a.flops`` it
    measures this machine's CPU now."""
    import json

    with open(a.results) as fh:
        results = json.load(fh)
    bw, fl = a.bandwidth, a.flops
    if bw is None:
        m = measure_copy_bandwidth("cpu")
        bw = m.value
        print(f"measured: {m.method}: best {m.value / 1e9:.2f} GB/s, median {m.median / 1e9:.2f} GB/s")
    if fl is None:
        mm = measure_matmul_flops("cpu")
        fl = mm.value
        print(f"measured: {mm.method}: best {mm.value / 1e9:.1f} GFLOP/s")
    from perfsuite import roofline_cache

    llc, cbw = a.llc_bytes, a.cache_bandwidth
    recorded = ((results.get("machine_info") or {}).get("perfsuite") or {})
    if llc is None and not ((recorded.get("doctor") or {}).get("cpu") or {}).get("llc_bytes"):
        llc = roofline_cache.llc_bytes_here()
    if cbw is None and a.bandwidth is None and llc and not (recorded.get("roofline") or {}).get(
            "cache_copy_bandwidth_bytes_per_s"):
        mc = roofline_cache.measure_cache_bandwidth(llc)
        cbw = mc.value
        print(f"measured: {mc.method}: best {mc.value / 1e9:.2f} GB/s")
    rows = annotate_results(results, bw, fl, a.device_name, llc, cbw)
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        if r.get("achieved_bandwidth_bytes_per_s") is not None and r["metric"] in ("tpot", "e2el"):
            print(f"{r['test']}: decode {r['decode_bytes_per_step'] / 1e6:.2f} MB/step "
                  f"(weights {r['decode_weight_bytes'] / 1e6:.2f} MB + KV {r['decode_kv_cache_bytes_per_step'] / 1e6:.3f}"
                  f" MB at context {r['decode_context_tokens']:.0f}) / step {r['roofline_step_ms']:.3f} ms = "
                  f"{r['achieved_bandwidth_bytes_per_s'] / 1e9:.2f} GB/s = {roofline_cache.share_text(r)}")
        if r.get("achieved_prefill_flops_per_s") is not None and r["metric"] in ("ttft", "e2el"):
            print(f"{r['test']}: prefill {r['prefill_flops'] / 1e9:.3f} GFLOP / TTFT {r['median_ttft_ms']:.3f} ms = "
                  f"{r['achieved_prefill_flops_per_s'] / 1e9:.2f} GFLOP/s = "
                  f"{r['prefill_flops_efficiency_measured']:.1%} of measured matmul {fl / 1e9:.1f} GFLOP/s")
    return 0

