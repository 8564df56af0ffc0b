"""Reading run files (pytest-benchmark JSON written by perfsuite) and matching benchmarks across them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.facts.errors import reraise_as
from perfsuite.orchestrate import baselines


class InputError(Exception):
    """Unusable input for compare/ab/calibrate; one line naming the file and the fix."""


def run_paths(path: Path) -> list[Path]:
    """A file, or the run files of a storage folder (``NNNN_*.json``, else every ``*.json``), oldest first."""
    path = Path(path)
    if path.is_dir():
        runs = baselines.list_runs(path) or sorted(p for p in path.glob("*.json") if p.is_file())
        if not runs:
            raise InputError(f"{path}: no run files (*.json) in this folder; point at a pytest-benchmark JSON file "
                             "or a baselines/<runner-class>/ folder")
        return runs
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    return [path]


def load_runs(path: Path, runner_class: str | None = None, last: int | None = None, role: str = "baseline"
              ) -> list[dict[str, Any]]:
    """Validated runs (see perfsuite.orchestrate.baselines.read_run); all of one runner class. ``role`` names them in
    messages ("baseline" or "current")."""
    paths = run_paths(path)
    if last:
        paths = paths[-last:]
    runs = []
    for p in paths:
        with reraise_as(InputError, baselines.BaselineError):
            data = baselines.read_run(p, runner_class, role=role)
        if not data["benchmarks"]:
            raise InputError(f"{p}: the 'benchmarks' list is empty (no benchmark ran); re-record the run")
        data["_path"] = str(p)
        runs.append(data)
    classes = {runner_class_of(r) for r in runs}
    if len(classes) > 1:
        raise InputError(f"{path}: runs of several runner classes ({', '.join(sorted(map(str, classes)))}); keep "
                         "one folder per runner class")
    return runs


def runner_class_of(run: Mapping[str, Any]) -> str | None:
    return (run.get("machine_info") or {}).get("perfsuite", {}).get("runner_class")
