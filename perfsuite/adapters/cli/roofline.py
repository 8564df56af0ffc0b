"""``perfsuite roofline RESULTS.json``: the roofline of each cell of a results file, after the fact.

For each decode (test_tpot, test_e2el) the bytes a step moves (weights + KV cache) over the measured step time, as a
share of the memory bandwidth; for each prefill the FLOP/s achieved, as a share of the matmul peak. Without
--bandwidth / --flops it measures this machine's CPU now; a GPU run takes the datasheet figures of --device-name.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, measuring


def register(sub: Any) -> None:
    p = add_command(sub, "roofline", "the roofline of each cell of a results file", __doc__, main)
    p.add_argument("results", type=Path, help="a pytest-benchmark JSON file written by perfsuite")
    p.add_argument("--bandwidth", type=float, default=None, help="bytes/s (default: measure the CPU copy now)")
    p.add_argument("--flops", type=float, default=None, help="FLOP/s (default: measure a CPU matmul now)")
    p.add_argument("--device-name", default=None, help="for the datasheet figures of a GPU run")
    p.add_argument("--llc-bytes", type=int, default=None,
                   help="last-level cache size (default: the file's, else this CPU's)")
    p.add_argument("--cache-bandwidth", type=float, default=None,
                   help="bytes/s within the LLC (default: the file's, else measured now with --bandwidth unset)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def main(args: argparse.Namespace) -> int:
    import json

    from perfsuite.facts.errors import UsageError
    from perfsuite.machine.roofline import peaks
    from perfsuite.machine.roofline.annotate import annotate_results, recorded, share_text

    if not args.results.is_file():
        raise UsageError(f"{args.results}: no such results file; pass a JSON file written with --benchmark-json")
    try:
        results = json.loads(args.results.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{args.results}: not a readable JSON results file ({exc}); pass a file written with "
                         "--benchmark-json") from None
    bw, fl = args.bandwidth, args.flops
    with measuring("roofline") if bw is None or fl is None else nullcontext():  # one perfsuite run measures at a time
        if bw is None:
            m = peaks.measure_copy_bandwidth("cpu")
            bw = m.value
            print(f"measured: {m.method}: best {m.value / 1e9:.2f} GB/s, median {m.median / 1e9:.2f} GB/s")
        if fl is None:
            mm = peaks.measure_matmul_flops("cpu")
            fl = mm.value
            print(f"measured: {mm.method}: best {mm.value / 1e9:.1f} GFLOP/s")
        llc, cbw = args.llc_bytes, args.cache_bandwidth
        doctor_cpu, roofline = recorded(results)
        if llc is None and not doctor_cpu.get("llc_bytes"):
            llc = peaks.llc_bytes_here()
        if cbw is None and args.bandwidth is None and llc and not roofline.get("cache_copy_bandwidth_bytes_per_s"):
            mc = peaks.measure_cache_bandwidth(llc)
            cbw = mc.value
            print(f"measured: {mc.method}: best {mc.value / 1e9:.2f} GB/s")
    rows = annotate_results(results, bw, fl, args.device_name, llc, cbw)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        if r.get("achieved_bandwidth_bytes_per_s") is not None and r["metric"] in ("tpot", "e2el"):
            print(f"{r['test']}: decode {r['decode_bytes_per_step'] / 1e6:.2f} MB/step "
                  f"(weights {r['decode_weight_bytes'] / 1e6:.2f} MB + KV {r['decode_kv_cache_bytes_per_step'] / 1e6:.3f}"
                  f" MB at context {r['decode_context_tokens']:.0f}) / step {r['roofline_step_ms']:.3f} ms = "
                  f"{r['achieved_bandwidth_bytes_per_s'] / 1e9:.2f} GB/s = {share_text(r)}")
        if r.get("achieved_prefill_flops_per_s") is not None and r["metric"] in ("ttft", "e2el"):
            print(f"{r['test']}: prefill {r['prefill_flops'] / 1e9:.3f} GFLOP / TTFT {r['median_ttft_ms']:.3f} ms = "
                  f"{r['achieved_prefill_flops_per_s'] / 1e9:.2f} GFLOP/s = "
                  f"{r['prefill_flops_efficiency_measured']:.1%} of measured matmul {fl / 1e9:.1f} GFLOP/s")
    return 0
