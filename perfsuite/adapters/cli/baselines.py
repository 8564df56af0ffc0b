"""``perfsuite baselines migrate``: move runs recorded under an older runner class name to today's folder.

CPU runner classes now carry the instruction-set tier (``cpu-intel-xeon-2c`` is ``cpu-intel-xeon-amx-2c`` on an
AMX Xeon, ``cpu-amd-epyc-avx2-2c`` on an AVX2-only EPYC). Every run file in ``<baselines_dir>/<class>/`` is read,
never rewritten; a run recorded under its machine's detected pre-tier name moves, byte for byte, to the folder of
the class that the CPU flags it recorded give (one old folder may hold runs of machines of two tiers: they part).
A folder whose runs all go to one class without a folder yet is renamed whole, else the files move one by one;
nothing ever moves onto an existing file or run number (then nothing moves at all). A known-gaps file named after
an old class (``known_gaps/<old>.toml``) moves with it to ``known_gaps/<class>.toml``, where the old folder's runs
all went to one class, or the old name is this machine's (otherwise it stays: its runs parted between classes). Inside a git
work tree the moves are ``git mv``. ``--dry-run`` prints the moves only. Exit 0 (moved, or nothing to do), 2 (bad input or a
clash; one line naming it).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, usage_errors
from perfsuite.facts import config as cfg
from perfsuite.facts.errors import UsageError
from perfsuite.machine.external import run_tool


@dataclass(frozen=True)
class Move:
    src: Path
    dst: Path
    runs: int  # run files moved (a folder move carries all of its runs)
    whole: bool = False  # the folder itself is renamed


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "baselines",
                    "baseline folder maintenance (migrate old runner class names)", __doc__, main)
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    m = sub.add_parser("migrate", help="move runs recorded under a pre-tier runner class name to today's folder",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("--dir", default=None, help="the baselines folder (default: [tool.perfsuite] baselines_dir of "
                   "the project around the working directory)")
    m.add_argument("--dry-run", action="store_true", help="print the moves, make none")


def _baselines_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    with usage_errors(cfg.ConfigError):  # no [tool.perfsuite]: the built-in default, ./baselines
        return cfg.load(cfg.find_pyproject(Path.cwd()), Path.cwd()).baselines_dir


def plan(root: Path) -> list[Move]:
    """The moves that put every run of ``root`` in its class's folder; UsageError for an unreadable run or a move
    that would land on an existing file or run number."""
    from perfsuite.orchestrate import baselines

    moves: list[Move] = []
    taken: dict[Path, set[str]] = {}  # target folder -> run numbers there, existing or planned
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "known_gaps"):
        targets: dict[Path, str] = {}
        for run in baselines.list_runs(folder):
            try:
                meta = baselines.read_run(run)["machine_info"]["perfsuite"]
            except baselines.BaselineError as exc:
                raise UsageError(f"{exc}; nothing was moved") from None
            if meta.get("runner_class_recorded") == folder.name and meta.get("runner_class") != folder.name:
                targets[run] = str(meta["runner_class"])
        classes = set(targets.values())
        if not classes:
            continue
        new = root / classes.pop()
        if not classes and not new.exists() and len(targets) == len(list(folder.iterdir())):
            moves.append(Move(folder, new, len(targets), whole=True))
            taken[new] = {r.name[:4] for r in targets}
            _gaps_move(root, folder.name, new.name, moves)
            continue
        if not classes:
            _gaps_move(root, folder.name, new.name, moves)
        for run, cls in targets.items():
            dst = root / cls / run.name
            numbers = taken.setdefault(dst.parent, {r.name[:4] for r in baselines.list_runs(dst.parent)})
            if dst.exists() or run.name[:4] in numbers:
                raise UsageError(f"{run}: belongs in {dst.parent}, which already has run {run.name[:4]}; move it by "
                                 "hand under a free number (nothing was moved)")
            numbers.add(run.name[:4])
            moves.append(Move(run, dst, 1))
    _this_machine_gaps(root, moves)
    return moves


def _gaps_move(root: Path, old: str, new: str, moves: list[Move]) -> None:
    src, dst = root / "known_gaps" / f"{old}.toml", root / "known_gaps" / f"{new}.toml"
    if not src.is_file() or any(m.src == src for m in moves):
        return
    if dst.exists():
        raise UsageError(f"{src}: belongs at {dst}, which exists; merge the two by hand (nothing was moved)")
    moves.append(Move(src, dst, 0))


def _this_machine_gaps(root: Path, moves: list[Move]) -> None:
    """This machine's known-gaps file under its old name, when no old folder of runs said where it goes."""
    from perfsuite.machine import runner_class

    try:
        rc, facts = runner_class.detect("cpu")
    except ValueError:  # a malformed PERFSUITE_CPU_FLAGS: nothing to say about this machine
        return
    if not facts.get("cpu_flags_injected") and facts["legacy_runner_class"] != rc:
        _gaps_move(root, facts["legacy_runner_class"], rc, moves)


def apply(move: Move) -> str:
    """Make one move, never over an existing path; returns how (``git mv`` or ``rename``)."""
    if move.dst.exists():
        raise UsageError(f"{move.dst} appeared while migrating; {move.src} was left where it is")
    move.dst.parent.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(move.src.parent)]
    tracked = run_tool([*git, "ls-files", "--", move.src.name], 60)
    if tracked.ok and tracked.stdout.strip():
        res = run_tool([*git, "mv", "--", move.src.name, str(move.dst.resolve())], 60)
        if not res.ok:
            raise UsageError(f"git mv {move.src} {move.dst} failed: {(res.stderr or res.problem).strip()}")
        return "git mv"
    if move.src.is_dir():
        os.rename(move.src, move.dst)
    else:
        os.link(move.src, move.dst)  # fails rather than replace
        os.unlink(move.src)
    return "rename"


def main(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) != "migrate":
        raise UsageError("name an action: perfsuite baselines migrate [--dir DIR] [--dry-run]")
    root = _baselines_dir(args.dir)
    if not root.is_dir():
        raise UsageError(f"--dir {root}: no such folder; pass the folder that holds the runner class folders")
    moves = plan(root)
    if not moves:
        print(f"perfsuite baselines migrate: nothing to migrate in {root}: every run is in its class's folder")
        return 0
    for m in moves:
        how = "would move" if args.dry_run else f"moved ({apply(m)})"
        print(f"{how} {m.src} -> {m.dst}" + (f" ({m.runs} run(s))" if m.whole else ""))
    if not args.dry_run:
        for folder in {m.src.parent for m in moves if m.runs and not m.whole}:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        gaps = sum(not m.runs for m in moves)
        print(f"perfsuite baselines migrate: {sum(m.runs for m in moves)} run(s)"
              + (f" and {gaps} known-gaps file(s)" if gaps else "") + " moved, files unchanged")
    return 0
