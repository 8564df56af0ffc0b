"""``perfsuite ops``: hypothesis-driven operator coverage matrix (op x shape class x backend x dtype).

Writes ``<out>/ops-matrix.md`` and ``<out>/ops-matrix.json``, compares the non-pass cells with
``baselines/known_gaps/<runner-class>.toml`` and exits 1 if there is a new gap (0 otherwise; fixed gaps are
reported, and fail only with ``--strict-fixed``). ``--repro '<json>'`` reruns one cell from the matrix.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_BACKENDS = "torch,torch-compile,onnxruntime-cpu"


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backends", default=DEFAULT_BACKENDS, help=f"comma list (default {DEFAULT_BACKENDS}); "
                   "torch, torch-compile, onnxruntime-{cpu,cuda,rocm,migraphx,dml}")
    p.add_argument("--ops", default="all", help="comma list of ops (default: all); see --list")
    p.add_argument("--dtypes", default="float32,float16,bfloat16")
    p.add_argument("--classes", default="all", help="shape classes: unit,decode,prefill,long,tile_edge,odd")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="torch device (a ROCm GPU is cuda)")
    p.add_argument("--profile", default=None, help="hypothesis profile: ci | nightly | gpu-smoke (default: "
                   "$PERFSUITE_HYPOTHESIS_PROFILE or ci)")
    p.add_argument("--examples", type=int, default=None, help="examples per (op, shape class); default by profile")
    p.add_argument("--bounds", default=None, choices=("small", "large"), help="shape bounds (default: small on "
                   "cpu, large on cuda)")
    p.add_argument("--isolate", default="risky", choices=("none", "risky", "all"),
                   help="run cells in a subprocess so a crash fails one cell (default: risky ops only)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per isolated cell before it is a crash")
    p.add_argument("--out", default="perfsuite-ops", help="output directory for ops-matrix.{md,json}")
    p.add_argument("--runner-class", default=None, help="default: detected")
    p.add_argument("--known-gaps", default=None, help="known-gaps TOML (default baselines/known_gaps/<runner>.toml)")
    p.add_argument("--write-known-gaps", action="store_true", help="write the current gaps as the known-gaps file")
    p.add_argument("--strict-fixed", action="store_true", help="fail when a known gap is fixed")
    p.add_argument("--repro", default=None, help="rerun one cell: the JSON `repro` of a matrix cell")
    p.add_argument("--list", action="store_true", help="list ops and exit")
    p.add_argument("-q", "--quiet", action="store_true")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ops", help="operator coverage matrix (hypothesis shape sweep)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from perfsuite.ops import known_gaps, profiles, registry
    from perfsuite.ops.sweep import SweepConfig, repro, run_sweep

    if args.list:
        for name in registry.public_ops():
            print(f"{name:22s} {registry.get(name).doc}")
        return 0
    if args.repro:
        blob = json.loads(args.repro)
        r = repro(blob, args.device, isolate=args.isolate == "all")
        print(json.dumps(r.as_dict(), indent=1, default=str))
        return 0 if r.status == "pass" else 1

    ops = registry.public_ops() if args.ops == "all" else _csv(args.ops)
    for o in ops:
        registry.get(o)  # unknown names fail here with the list
    from perfsuite.ops.shapes import SHAPE_CLASSES

    classes = list(SHAPE_CLASSES) if args.classes == "all" else _csv(args.classes)
    bad = [c for c in classes if c not in SHAPE_CLASSES]
    if bad:
        print(f"perfsuite ops: unknown shape class(es) {bad}; use {', '.join(SHAPE_CLASSES)}", file=sys.stderr)
        return 2
    profile = profiles.selected(args.profile)
    bounds = args.bounds or ("large" if args.device == "cuda" else profiles.BOUNDS_OF[profile])
    examples = args.examples or profiles.SWEEP_EXAMPLES[profile]
    database = None
    if profile == "nightly":
        database = profiles._settings_kwargs("nightly")["database"]
    if args.runner_class:
        rc = args.runner_class
    else:
        from perfsuite.runner_class import detect

        rc = detect(args.device)[0]
    gaps_path = Path(args.known_gaps) if args.known_gaps else known_gaps.path_for(rc)
    gaps = known_gaps.load(gaps_path)

    cfg = SweepConfig(ops=ops, backends=_csv(args.backends), dtypes=_csv(args.dtypes), classes=classes,
                      bounds=bounds, examples=examples, device=args.device, isolate=args.isolate,
                      derandomize=profile != "nightly", database=database, timeout_s=args.timeout)
    log = None if args.quiet else (lambda line: print(line, flush=True))
    t0 = time.perf_counter()
    matrix = run_sweep(cfg, progress=log)
    seconds = time.perf_counter() - t0

    import onnxruntime
    import torch

    meta = {"runner_class": rc, "profile": profile, "bounds": bounds, "device": args.device,
            "examples_per_class": examples, "seconds": round(seconds, 1), "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__, "known_gaps_file": str(gaps_path),
            "isolate": args.isolate, "backends": cfg.backends, "dtypes": cfg.dtypes}
    cells = matrix.cell_dicts()
    report = known_gaps.evaluate(cells, gaps)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ops-matrix.json").write_text(matrix.to_json(meta, report))
    (out / "ops-matrix.md").write_text(matrix.to_markdown(meta, report))
    if args.write_known_gaps:
        gaps_path.parent.mkdir(parents=True, exist_ok=True)
        gaps_path.write_text(known_gaps.render(rc, cells))
        print(f"wrote {gaps_path}")
    n_fail = sum(1 for c in cells if c["worst"] != "pass")
    print(f"perfsuite ops: {len(cells)} cells, {n_fail} with gaps ({len(report.new)} new, {len(report.known)} "
          f"known), {len(report.fixed)} fixed known gap(s); {seconds:.1f}s; wrote {out}/ops-matrix.{{md,json}}")
    for g in report.new:
        print(f"  NEW {g['op']}/{g['shape_class']}/{g['backend']}/{g['dtype']}: {g['worst']}: {g['detail']}")
        print(f"      repro: perfsuite ops --repro '{json.dumps(g['repro'])}'")
    for g in report.fixed:
        print(f"  FIXED {g['gap']}: all {g['cells_passed']} matching cell(s) pass; delete the entry")
    if report.new and not args.write_known_gaps:
        return 1
    if report.fixed and args.strict_fixed:
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="perfsuite ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
