from __future__ import annotations

from pathlib import Path

from perfsuite import config as cfg


def project_root() -> Path:
    """The checkout holding ``[tool.perfsuite]`` and tests/perf, searched upwards from the working directory."""
    pyproject = cfg.find_pyproject(Path.cwd())
    if pyproject is None or not (pyproject.parent / "tests" / "perf").is_dir():
        raise SystemExit("perfsuite: run this inside a perfsuite checkout (no pyproject.toml with [tool.perfsuite] "
                         "and tests/perf/ above the current directory)")
    return pyproject.parent
