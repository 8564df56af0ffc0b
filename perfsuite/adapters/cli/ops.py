"""``perfsuite ops``: hypothesis-driven operator coverage matrix (op x shape class x backend x dtype).

Writes ``<out>/ops-matrix.md`` and ``<out>/ops-matrix.json``, compares the non-pass cells with the known gaps of
the runner class (``baselines/known_gaps/{all,<family>,<runner-class>}.toml``, entries whose ``when`` holds here)
and exits 1 if there is a new gap (0 otherwise; fixed gaps are reported, and fail only with ``--strict-fixed``).
On a CPU/GPU feature set that no known-gaps file characterises (``characterised_on``), an unmatched non-pass cell
is reported as not yet characterised on <features>, not failed; ``--strict`` (the nightly) fails it. Bad input (an
option, a malformed known-gaps file) is exit 2 with one line. ``--repro '<json>'`` reruns one cell.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, check_locations, usage_errors
from perfsuite.facts.errors import UsageError

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
    p.add_argument("--runner-class", default=None, help="default: $PERFSUITE_RUNNER_CLASS, else detected")
    p.add_argument("--known-gaps", default=None, help="one known-gaps TOML to use instead of baselines/known_gaps/"
                   "{all,<family>,<runner-class>}.toml")
    p.add_argument("--write-known-gaps", action="store_true", help="write the gaps not covered by all.toml and the "
                   "family file as baselines/known_gaps/<runner-class>.toml (or --known-gaps FILE)")
    p.add_argument("--strict-fixed", action="store_true", help="fail when a known gap is fixed")
    p.add_argument("--strict", action="store_true", help="fail on a non-pass cell that no known gap matches also "
                   "on a feature set no known-gaps file characterises (default: reported as not yet characterised)")
    p.add_argument("--repro", default=None, help="rerun one cell: the JSON `repro` of a matrix cell")
    p.add_argument("--list", action="store_true", help="list ops and exit")
    p.add_argument("-q", "--quiet", action="store_true")


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "ops", "operator coverage matrix (hypothesis shape sweep)", __doc__, main)
    add_arguments(p)


def _runner_class(args: argparse.Namespace) -> str:
    import os

    from perfsuite.facts.runner_name import validate
    from perfsuite.machine.runner_class import detect

    given, source = ((args.runner_class, "--runner-class") if args.runner_class else
                     (os.environ.get("PERFSUITE_RUNNER_CLASS"), "PERFSUITE_RUNNER_CLASS"))
    # an invalid class; --device cuda without a GPU; a bad PERFSUITE_CPU_FLAGS
    with usage_errors(RuntimeError, ValueError):
        return validate(given, source) if given else detect(args.device)[0]


def _gaps(args: argparse.Namespace, rc: str) -> tuple[Any, Path, list[Any]]:
    """(GapSet, the file --write-known-gaps writes, the gaps that file need not repeat)."""
    from perfsuite.measure.ops import known_gaps

    with usage_errors(known_gaps.KnownGapsError, ValueError, RuntimeError):
        if args.known_gaps:
            path = Path(args.known_gaps)
            # the file given characterises this machine, unless its characterised_on says otherwise
            return known_gaps.read(rc, (path,), path, known_gaps.environment(args.device)), path, []
        directory = known_gaps.directory_for()
        found = known_gaps.for_runner(rc, directory, env=known_gaps.environment(args.device))
        own = known_gaps.path_for(rc, directory)
        mine = {own, *found.files[-1:]} if found.renamed else {own}  # the class's file, maybe under its old name
        return found, own, [g for g in found.gaps if Path(g.source) not in mine]


def main(args: argparse.Namespace) -> int:
    from perfsuite.measure.ops import known_gaps, profiles, registry
    from perfsuite.measure.ops.shapes import SHAPE_CLASSES
    from perfsuite.measure.ops.sweep import SweepConfig, repro, run_sweep

    if args.list:
        for name in registry.public_ops():
            print(f"{name:22s} {registry.get(name).doc}")
        return 0
    if args.repro:
        try:
            blob = json.loads(args.repro)
        except ValueError as exc:
            raise UsageError(f"--repro: not JSON ({exc}); pass the \"repro\" object of a matrix cell, quoted") from None
        r = repro(blob, args.device, isolate=args.isolate == "all")
        print(json.dumps(r.as_dict(), indent=1, default=str))
        return 0 if r.status == "pass" else 1

    check_locations((Path(args.out), "--out", "folder"))
    ops = registry.public_ops() if args.ops == "all" else _csv(args.ops)
    unknown_ops = [o for o in ops if o not in registry.public_ops()]
    if unknown_ops:
        raise UsageError(f"--ops: unknown op(s) {', '.join(unknown_ops)}; known: {', '.join(registry.public_ops())}")
    classes = list(SHAPE_CLASSES) if args.classes == "all" else _csv(args.classes)
    bad = [c for c in classes if c not in SHAPE_CLASSES]
    if bad:
        raise UsageError(f"--classes: unknown shape class(es) {', '.join(bad)}; use {', '.join(SHAPE_CLASSES)}")
    with usage_errors(profiles.ProfileError):
        profile = profiles.selected(args.profile, source="--profile" if args.profile else None)
    bounds = args.bounds or ("large" if args.device == "cuda" else profiles.BOUNDS_OF[profile])
    examples = args.examples if args.examples is not None else profiles.SWEEP_EXAMPLES[profile]
    if examples < 1:
        raise UsageError(f"--examples {examples}: use a whole number >= 1")
    database = profiles._settings_kwargs("nightly")["database"] if profile == "nightly" else None
    rc = _runner_class(args)
    found, gaps_path, covered = _gaps(args, rc)

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
            "onnxruntime": onnxruntime.__version__, "known_gaps_file": ", ".join(map(str, found.files)) or "none",
            "known_gaps_scope": found.describe(), "characterised": found.characterised,
            "features": found.features, "strict": args.strict,
            "isolate": args.isolate, "backends": cfg.backends, "dtypes": cfg.dtypes}
    cells = matrix.cell_dicts()
    report = known_gaps.evaluate(cells, found.gaps, characterised=found.characterised or args.write_known_gaps)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ops-matrix.json").write_text(matrix.to_json(meta, report))
    (out / "ops-matrix.md").write_text(matrix.to_markdown(meta, report))
    if args.write_known_gaps:
        gaps_path.parent.mkdir(parents=True, exist_ok=True)
        gaps_path.write_text(known_gaps.render(rc, cells, covered=covered))
        print(f"wrote {gaps_path}")
    n_fail = sum(1 for c in cells if c["worst"] != "pass")
    print(f"perfsuite ops: {len(cells)} cells, {n_fail} with gaps ({len(report.new)} new, {len(report.known)} "
          f"known), {len(report.fixed)} fixed known gap(s); {seconds:.1f}s; wrote {out}/ops-matrix.{{md,json}}")
    print(f"  {found.describe()}")
    for g in report.new:
        print(f"  NEW {g['op']}/{g['shape_class']}/{g['backend']}/{g['dtype']}: {g['worst']}: {g['detail']}")
        print(f"      repro: perfsuite ops --repro '{json.dumps(g['repro'])}'")
    if report.uncharacterised:
        print(f"  not yet characterised on {found.features}: {len(report.uncharacterised)} non-pass cell(s) that "
              f"no known gap matches, {'FAILED (--strict)' if args.strict else 'reported, not failed'}; review "
              "them, then record the real gaps (--write-known-gaps) and the feature set (characterised_on)")
        for g in report.uncharacterised:
            print(f"  NOT CHARACTERISED {g['op']}/{g['shape_class']}/{g['backend']}/{g['dtype']}: {g['worst']}: "
                  f"{g['detail']}")
    for g in report.fixed:
        fix = ("under injected CPU flags this CPU's kernels ran, not the injected CPU's: keep the entry"
               if found.env and found.env.cpu_flags_injected else "delete the entry")
        print(f"  FIXED {g['gap']}: all {g['cells_passed']} matching cell(s) pass; {fix}")
    failed = (report.new or (args.strict and report.uncharacterised)) and not args.write_known_gaps
    return 1 if failed or (report.fixed and args.strict_fixed) else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="perfsuite ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    try:
        sys.exit(main(parser.parse_args()))
    except UsageError as exc:
        print(f"perfsuite ops: {exc}", file=sys.stderr)
        sys.exit(2)
