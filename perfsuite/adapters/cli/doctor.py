"""``perfsuite doctor``: device facts, predicted hipErrorNoBinaryForGpu, overrides, access; exit 0 healthy, 1 a
blocking problem (each with its fix), 2 bad usage."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from perfsuite.facts.errors import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check the GPU, drivers, builds and overrides; predict hipErrorNoBinaryForGpu",
                       description="Facts from amdsmi / amd-smi / rocminfo / rocm-smi / KFD sysfs / NVML / "
                                   "nvidia-smi / torch, and findings with their fix. Exit 0 healthy, 1 blocking.")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto; cuda makes 'no GPU' an error)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of the table")
    p.add_argument("--no-torch", action="store_true", help="do not import torch (its arch list is then unchecked)")
    p.add_argument("--explain", metavar="FILE", default=None,
                   help="classify an error log or traceback (FILE, or - for stdin) instead of checking the machine")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from perfsuite.machine import doctor
    from perfsuite.machine.doctor.report import render

    if args.explain is not None:
        return _explain(args.explain, args.json)
    if args.device not in doctor.DEVICES:
        raise UsageError(f"--device {args.device!r} is not one of {', '.join(doctor.DEVICES)} "
                         "(a ROCm GPU is 'cuda' in torch)")
    report = doctor.collect(args.device, use_torch=not args.no_torch,
                            on_slow=lambda line: print(f"perfsuite doctor: {line}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        print("\n".join(render(report)))
    return report.exit_code


def _explain(source: str, as_json: bool) -> int:
    from perfsuite.machine.doctor import classify

    if source == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(source).read_text(errors="replace")
        except OSError as exc:
            raise UsageError(f"--explain {source}: cannot read it ({exc.strerror}); pass a log file or - for stdin") from exc
    findings = classify(text)
    if as_json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    elif not findings:
        print("no known GPU build/arch failure in this text")
    else:
        for f in findings:
            print(f"{f.level.upper()} [{f.topic}] {f.message}" + (f"\n      fix: {f.fix}" if f.fix else ""))
    return 1 if any(f.blocking for f in findings) else 0
