"""pytest-benchmark's own CLI on our stored runs, from the project root. It imports ./conftest.py before it builds a
pytest Config from pyproject.toml (``filterwarnings = error``); a conftest that imported perfsuite then made pytest's
"already imported, cannot be rewritten" warning for the perfsuite plugin an error (a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pytest_benchmark_compare_works_from_the_project_root() -> None:
    runs = sorted(p for d in (ROOT / "baselines").glob("cpu-*") for p in d.glob("0*.json"))[:2]
    assert len(runs) == 2, "the committed CPU baselines are needed"
    cli = [sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.exit(main())"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([*cli, "compare", *map(str, runs)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "test_tpot" in p.stdout and runs[0].name[:4] in p.stdout and runs[1].name[:4] in p.stdout, p.stdout
