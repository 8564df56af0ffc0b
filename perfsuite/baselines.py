"""Baseline store: pytest-benchmark JSON files in ``baselines/<runner-class>/NNNN_<tag>.json``.

One file is one process run. Files are only ever added, never rewritten: a new file is written to a temporary
name in the same folder and hard-linked into place, which fails instead of overwriting.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
_NAME = re.compile(r"^(\d{4})_.*\.json$")


class BaselineError(Exception):
    """A baseline that cannot be used; the message names the file and the fix."""


def list_runs(directory: Path) -> list[Path]:
    """Run files of one runner class, oldest first."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _NAME.match(p.name)), key=lambda p: p.name)


def read_run(path: Path, runner_class: str | None = None) -> dict[str, Any]:
    fix = "restore it with `git checkout -- <file>` or re-record with --perf-update-baselines"
    try:
        data = json.loads(Path(path).read_text(encoding="utf8"))
    except FileNotFoundError as exc:
        raise BaselineError(f"{path}: no such baseline file") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: corrupt baseline (not valid JSON: {exc}); {fix}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise BaselineError(f"{path}: not a pytest-benchmark result (no 'benchmarks' list); {fix}")
    meta = data.get("machine_info", {}).get("perfsuite")
    if not isinstance(meta, dict) or not isinstance(meta.get("schema_version"), int):
        raise BaselineError(f"{path}: no machine_info.perfsuite.schema_version: not written by perfsuite; "
                            "record baselines with `pytest --perf-update-baselines`")
    if meta["schema_version"] > SCHEMA_VERSION:
        raise BaselineError(f"{path}: schema_version {meta['schema_version']} is newer than this perfsuite "
                            f"({SCHEMA_VERSION}); upgrade perfsuite or re-record with --perf-update-baselines")
    if runner_class is not None and meta.get("runner_class") != runner_class:
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
    return [read_run(p, runner_class) for p in paths]


def write_run(directory: Path, data: dict[str, Any], tag: str) -> Path:
    """Add one run file atomically; never overwrites. Returns the new path."""
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", tag)[:80] or "run"
    directory.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(data, indent=2, sort_keys=False).encode()
    fd, tmp = tempfile.mkstemp(prefix=".incoming-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
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
