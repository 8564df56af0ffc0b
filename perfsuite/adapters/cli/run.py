"""``perfsuite run``: the main job. Runs the profile's matrix through pytest and prints one row per cell."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import check_locations, project_root, usage_errors
from perfsuite.facts import config as cfg
from perfsuite.facts import runner_name
from perfsuite.facts.vocabulary import DECODE_THROUGHPUT, OUTPUT_THROUGHPUT, num_cell
from perfsuite.machine import runner_class, signals
from perfsuite.orchestrate import baselines


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run the benchmark matrix and print TTFT/TPOT/tokens per s/memory per cell",
                       description="Extra arguments after the options are passed to pytest.")
    p.add_argument("--profile", default=None, help="smoke | pr | nightly (default: smoke)")
    p.add_argument("--backend", default=None, help="comma-separated backends")
    p.add_argument("--model", default=None, help="comma-separated models")
    p.add_argument("--device", default="cpu", help="cpu | cuda (default: cpu)")
    p.add_argument("--runner-class", default=None, help="override the detected runner class")
    p.add_argument("--update-baselines", action="store_true", help="record a new baseline if the run passes")
    p.add_argument("--json", type=Path, default=None, help="also keep the pytest-benchmark JSON here")
    p.set_defaults(func=main, accepts_extra=True)


def main(args: argparse.Namespace) -> int:
    root = project_root()
    check_locations((args.json, "--json", "file"))
    if args.json:
        return _run(root, args, args.json)
    with tempfile.TemporaryDirectory(prefix="perfsuite-") as tmp:  # the run's JSON, read below, then gone
        return _run(root, args, Path(tmp) / "run.json")


def _run(root: Path, args: argparse.Namespace, out: Path) -> int:
    cmd = [sys.executable, "-m", "pytest", str(root / "tests" / "perf"), "-q", f"--benchmark-json={out}",
           f"--perf-device={args.device}"]
    flags = (("--perf-profile", args.profile), ("--perf-backend", args.backend), ("--perf-model", args.model),
             ("--perf-runner-class", args.runner_class))
    cmd += [f"{flag}={value}" for flag, value in flags if value]
    if args.update_baselines:
        cmd.append("--perf-update-baselines")
    rc_name, base_dir = _baseline_dir(root, args)
    has_baseline = base_dir is not None and bool(baselines.list_runs(base_dir))
    if has_baseline and not args.update_baselines:
        cmd.append("--benchmark-compare")
    cmd += list(args.extra)
    print("+", " ".join(cmd), flush=True)
    code = signals.call(cmd, cwd=root)  # Ctrl-C and SIGTERM reach pytest, which ends its workers and records nothing
    if code in (130, 143):
        print(f"perfsuite run: interrupted (exit {code}); pytest's output above says what it kept")
        return code
    if not out.is_file():
        return code or 1
    current = json.loads(out.read_text())
    base = baselines.read_run(baselines.list_runs(base_dir)[-1]) if has_baseline and base_dir else None
    legacy = None  # this machine's runs under its pre-tier class name: name them rather than suggest recording anew
    if base_dir is not None and not has_baseline and not args.runner_class \
            and not os.environ.get("PERFSUITE_RUNNER_CLASS"):
        legacy = baselines.legacy_folder(base_dir.parent, str(rc_name),
                                         {**runner_class.detect("cpu")[1], "detected_runner_class": rc_name})
    lines = table(current, base) + footnotes(current, base, rc_name, base_dir, args, legacy) + roofline_notes(current)
    print("", *lines, sep="\n")
    return code


def _baseline_dir(root: Path, args: argparse.Namespace) -> tuple[str | None, Path | None]:
    """This machine's baseline folder as the plugin will see it: the class from --runner-class, else
    PERFSUITE_RUNNER_CLASS, else detected; validated; inside [tool.perfsuite] baselines_dir."""
    name = args.runner_class or os.environ.get("PERFSUITE_RUNNER_CLASS") or None
    if name is None and args.device == "cpu":
        name = runner_class.detect("cpu")[0]
    if name is None:
        return None, None
    with usage_errors(ValueError, baselines.BaselineError):
        conf = cfg.load(cfg.find_pyproject(root), root)
        return name, baselines.class_dir(conf.baselines_dir, runner_name.validate(name))


def _by_cell(data: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        cell = info.get("cell", {}).get("id") or b.get("param")
        cells.setdefault(cell, {})[info.get("metric", b["name"])] = b
    return cells


def _change(cur: dict[str, Any] | None, base: dict[str, Any] | None) -> str:
    if not cur or not base:
        return "—"
    return f"{cur['stats']['median'] / base['stats']['median'] - 1:+.1%}"


def _gbs(v: Any) -> str:
    return f"{v / 1e9:.1f}" if isinstance(v, (int, float)) else "—"


def table(current: dict[str, Any], base: dict[str, Any] | None) -> list[str]:
    """One row per cell (``options`` is the hash of the backend options that changed what ran: runs with other
    hashes are not compared). Changes are median vs the latest baseline run: an indication, not a verdict (the gate
    decides, with between-run noise; see the pytest output above). ``BW GB/s`` is the decode step's achieved
    bandwidth (bytes read per step / TPOT); ``BW %`` its fraction of the bandwidth measured on this device when
    the run started (perfsuite.machine.roofline.peaks): of the DRAM copy, or of the LLC copy ("38%c") for a
    cache-resident cell whose decode working set fits the last-level cache; "> peak" above the reference
    (:func:`roofline_notes` says why), "—" where the run recorded neither."""
    from perfsuite.adapters.cli import _serving_table as serving  # serving cells: their own columns, vLLM's names
    from perfsuite.machine.roofline.annotate import pct

    serve_rows = serving.rows(current, base)
    cur, old = _by_cell(current), _by_cell(base or {})
    cur = {k: v for k, v in cur.items() if k not in serving.by_cell(current)}
    if serve_rows and not cur:
        return serve_rows
    # TPOT (vLLM's per-request time per output token) where every row recorded it; runs that recorded only the
    # per-token gaps show those, labelled ITL
    recorded = [tests["tpot"].get("extra_info", {}) for tests in cur.values() if "tpot" in tests]
    step = "tpot" if all("median_tpot_ms" in x and "p99_tpot_ms" in x for x in recorded) else "itl"
    label = step.upper()
    head = (f"{'cell':<48} {'options':<12} {'TTFT p50 ms':>11} {label + ' p50 ms':>11} {label + ' p99 ms':>11} "
            f"{'tok/s':>8} {'peak MiB':>9} {'BW GB/s':>8} {'BW %':>6} {'ΔTTFT':>7} {'ΔTPOT':>7}")
    rows = [head, "-" * len(head)]
    f = functools.partial(num_cell, fmt=".3f")
    for cell, tests in cur.items():
        t, p, e = tests.get("ttft", {}), tests.get("tpot", {}), tests.get("e2el", {})
        ti, pi, ei = t.get("extra_info", {}), p.get("extra_info", {}), e.get("extra_info", {})
        mem = max((x.get("peak_device_used_bytes") or x.get("peak_allocated_bytes") or x.get("peak_rss_bytes") or 0)
                  for x in (ti, pi, ei))
        # end to end (test_e2el), else decode only (test_tpot; runs before 2026-12-01 stored it as output throughput)
        tps = ei.get(OUTPUT_THROUGHPUT) or pi.get(DECODE_THROUGHPUT) or pi.get(OUTPUT_THROUGHPUT)
        opts = str((pi.get("cell") or ti.get("cell") or ei.get("cell") or {}).get("options_hash") or "—")[:12]
        rows.append(f"{cell:<48} {opts:<12} {f(ti.get('median_ttft_ms')):>11} {f(pi.get(f'median_{step}_ms')):>11} "
                    f"{f(pi.get(f'p99_{step}_ms')):>11} {f(tps):>8} {mem / 2**20:>9.0f} "
                    f"{_gbs(pi.get('achieved_bandwidth_bytes_per_s')):>8} {pct(pi):>6} "
                    f"{_change(t, old.get(cell, {}).get('ttft')):>7} {_change(p, old.get(cell, {}).get('tpot')):>7}")
    return rows + ([""] + serve_rows if serve_rows else [])


def roofline_notes(current: dict[str, Any]) -> list[str]:
    """What a ``BW %`` of "c", "cache" or "> peak" means, per cell (perfsuite.machine.roofline.annotate)."""
    from perfsuite.machine.roofline.annotate import table_notes

    return table_notes([tests["tpot"].get("extra_info", {}) for tests in _by_cell(current).values()
                        if "tpot" in tests])


def footnotes(current: dict[str, Any], base: dict[str, Any] | None, runner_class_name: str | None,
              base_dir: Path | None, args: argparse.Namespace, legacy: Path | None = None) -> list[str]:
    """Why a Δ column shows "—", and the command that fixes it (``legacy``: this machine's old-style folder)."""
    flags = (("--profile", args.profile), ("--backend", args.backend), ("--model", args.model),
             ("--device", None if args.device == "cpu" else args.device), ("--runner-class", args.runner_class))
    record = "perfsuite run --update-baselines" + "".join(f" {flag} {v}" for flag, v in flags if v)
    if base is None and legacy is not None and runner_class_name:
        return [f"Δ: — because {baselines.legacy_message(legacy, runner_class_name)}."]
    if base is None:
        if args.update_baselines:
            return [f"Δ: this run is being recorded as the baseline of {runner_class_name}; the next run compares "
                    "against it."]
        where = f"runner class {runner_class_name!r} ({base_dir})" if runner_class_name else \
            "this device (pass --runner-class to name its baseline folder)"
        return [f"Δ: — because there is no baseline for {where}. Record one (the gate wants several runs) with:",
                f"    {record}"]
    missing = sorted(set(_by_cell(current)) - set(_by_cell(base)))
    if missing:
        return [f"Δ: — for {len(missing)} cell(s) the latest baseline does not have ({', '.join(missing[:3])}"
                f"{' ...' if len(missing) > 3 else ''}); add them with: {record}"]
    return []
