"""Baseline store: pytest-benchmark JSON files in ``baselines/<runner-class>/NNNN_<tag>.json``.

One file is one process run. Files are only ever added, never rewritten: a new file is written to a temporary
name in the same folder and hard-linked into place, which fails instead of overwriting. A run recorded before
runner classes carried the CPU's instruction-set tier is read under today's class name (the recorded one is kept
as ``runner_class_recorded``, in memory only); :func:`legacy_folder` finds this machine's folder under its old name.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from perfsuite.facts.errors import reraise_as
from perfsuite.facts.runner_name import validate
from perfsuite.machine.runner_class import recorded_class

SCHEMA_VERSION = 1
_NAME = re.compile(r"^(\d{4})_.*\.json$")


class BaselineError(Exception):
    """A baseline that cannot be used; the message names the file and the fix."""


def list_runs(directory: Path) -> list[Path]:
    """Run files of one runner class, oldest first."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _NAME.match(p.name)), key=lambda p: p.name)


# role -> (what the file is called, how to mend a broken one, how to write one)
_ROLES = {
    "baseline": ("baseline", "restore it with `git checkout -- <file>` or re-record with --perf-update-baselines",
                 "record baselines with `pytest --perf-update-baselines`"),
    "current": ("current run", "re-run the benchmarks to write it again (pytest --benchmark-json=FILE)",
                "write current runs with perfsuite's pytest plugin loaded (pytest --benchmark-json=FILE)"),
}


def read_run(path: Path, runner_class: str | None = None, role: str = "baseline") -> dict[str, Any]:
    """A validated run file. ``role`` names it in messages: ``baseline`` (a stored run, the default) or ``current``
    (a run being compared, e.g. ``perfsuite compare``'s second argument), whose fix is to re-run, not to restore."""
    if role not in _ROLES:
        raise ValueError(f"role {role!r}: use one of {', '.join(_ROLES)}")
    what, fix, record = _ROLES[role]
    try:
        data = json.loads(Path(path).read_text(encoding="utf8"))
    except FileNotFoundError as exc:
        raise BaselineError(f"{path}: no such {what} file") from exc
    except IsADirectoryError as exc:
        raise BaselineError(f"{path}: a folder, not a {what} file") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: corrupt {what} (not valid JSON: {exc}); {fix}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise BaselineError(f"{path}: not a pytest-benchmark result (no 'benchmarks' list); {fix}")
    meta = (data.get("machine_info") or {}).get("perfsuite") if isinstance(data.get("machine_info"), dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("schema_version"), int):
        raise BaselineError(f"{path}: no machine_info.perfsuite.schema_version: not written by perfsuite; {record}")
    if meta["schema_version"] > SCHEMA_VERSION:
        raise BaselineError(f"{path}: schema_version {meta['schema_version']} is newer than this perfsuite "
                            f"({SCHEMA_VERSION}); upgrade perfsuite or re-record with --perf-update-baselines")
    current = recorded_class(data["machine_info"])
    if current != meta.get("runner_class"):  # recorded before classes carried the tier: read under today's name
        meta["runner_class_recorded"], meta["runner_class"] = meta.get("runner_class"), current
    if runner_class is not None and runner_class not in (meta.get("runner_class"), meta.get("runner_class_recorded")):
        raise BaselineError(f"{path}: recorded on runner class {meta.get('runner_class')!r}, this machine is "
                            f"{runner_class!r}; compare like with like, or pass --perf-runner-class if the "
                            "machines really are equivalent")
    for b in data["benchmarks"]:
        if not isinstance(b, dict) or "fullname" not in b or "stats" not in b:
            raise BaselineError(f"{path}: a benchmark entry lacks 'fullname' or 'stats'; {fix}")
    return data


def read_runs(directory: Path, runner_class: str | None = None, last: int | None = None) -> list[dict[str, Any]]:
    paths = list_runs(directory)
    if last:
        paths = paths[-last:]
    return [{**read_run(p, runner_class), "_path": str(p)} for p in paths]  # _path: named in the gate's notes


def compared_runs(runs: list[dict[str, Any]], compare: str, runner_class: str) -> tuple[list[dict[str, Any]], str]:
    """The stored runs ``--benchmark-compare=NNNN`` names, as pytest-benchmark finds them (``NNNN*.json`` in the
    class folder), and the note saying so; BaselineError when it names none or names a file elsewhere."""
    flag = f"--benchmark-compare={compare}"
    if "/" in compare or Path(compare).is_file():
        raise BaselineError(f"{flag}: the gate compares with the stored runs of {runner_class} only; pass a run "
                            "number (e.g. 0001), or compare files with `perfsuite compare BASE CURRENT`")
    pattern = compare.rstrip("*") + "*.json"
    names = {Path(r["_path"]).name: r for r in runs if r.get("_path")}
    chosen = [r for n, r in names.items() if fnmatch.fnmatch(n, pattern)]
    if not chosen:
        raise BaselineError(f"{flag}: no stored run of {runner_class} matches {pattern} (runs: "
                            f"{', '.join(sorted(names)) or 'none'}); pass one of their numbers")
    shown = ", ".join(Path(r["_path"]).name for r in chosen)
    drift = "; one baseline run: run-to-run drift unknown" if len(chosen) == 1 else ""
    return chosen, f"perfsuite: {flag}: the gate compares with {shown} only, like pytest-benchmark's table{drift}"


def class_dir(baselines_dir: Path, runner_class: str) -> Path:
    """``baselines_dir/<runner_class>``, refused (BaselineError) unless the class is a valid runner class and the
    folder, symlinks resolved, lies inside ``baselines_dir``: a class never names a path."""
    with reraise_as(BaselineError, ValueError):
        validate(runner_class)
    folder = Path(baselines_dir) / runner_class
    root = Path(baselines_dir).resolve()
    real = folder.resolve()
    if real.parent != root:
        raise BaselineError(f"{folder}: resolves to {real}, outside {root}; a runner class folder must be a "
                            "plain folder in the baselines folder (remove the symlink)")
    return folder


def _umask() -> int:
    try:  # Linux >= 4.7 reports it without changing it (os.umask(0) would, briefly, for every thread)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_run(directory: Path, data: dict[str, Any], tag: str, *, baselines_dir: Path | None = None) -> Path:
    """Add one run file atomically, never overwriting; the new path. With ``baselines_dir``, ``directory`` must be
    one runner class folder inside it (:func:`class_dir`). The file gets the mode a committed baseline has (0666
    less the umask: 0644 under the usual 022), not mkstemp's 0600."""
    if baselines_dir is not None:
        rel = Path(directory).relative_to(baselines_dir) if Path(directory).is_relative_to(baselines_dir) else None
        if rel is None or len(rel.parts) != 1:
            raise BaselineError(f"{directory}: not a runner class folder of {baselines_dir}; refusing to write there")
        class_dir(baselines_dir, rel.parts[0])
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", tag)[:80] or "run"
    directory.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(data, indent=2, sort_keys=False).encode()
    fd, tmp = tempfile.mkstemp(prefix=".incoming-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # what open() gives a new file; mkstemp gives 0600
            os.fsync(fh.fileno())
        for _ in range(100):
            runs = list_runs(directory)
            num = int(_NAME.match(runs[-1].name).group(1)) + 1 if runs else 1  # type: ignore[union-attr]
            final = directory / f"{num:04d}_{tag}.json"
            try:
                os.link(tmp, final)  # fails with FileExistsError rather than replace
                return final
            except FileExistsError:
                continue
        raise BaselineError(f"{directory}: could not find a free run number")
    finally:
        os.unlink(tmp)


def legacy_folder(baselines_dir: Path, runner_class: str, facts: dict[str, Any]) -> Path | None:
    """This machine's baseline folder under its pre-tier name (``facts["legacy_runner_class"]``), if the class was
    detected (not overridden), its own folder holds no run and the old one does: the runs need migrating first."""
    legacy = facts.get("legacy_runner_class")
    if not legacy or legacy == runner_class or facts.get("detected_runner_class") != runner_class:
        return None
    if list_runs(Path(baselines_dir) / runner_class) or not list_runs(Path(baselines_dir) / legacy):
        return None
    return Path(baselines_dir) / legacy


def legacy_message(old: Path, runner_class: str) -> str:
    return (f"{old} holds this machine's baselines under its old runner class name {old.name!r}; runner classes "
            f"now carry the CPU's instruction-set tier, so this machine is {runner_class!r}. Migrate the folder "
            f"(files unchanged) with `perfsuite baselines migrate` (or `git mv {old} {old.parent / runner_class}`)")
