"""Run files for the history tests: the real run of data/ and variants of it (other commits, dates, values)."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
REAL_RUN = DATA / "run_cpu-intel-xeon-2c_smoke.json"  # a real smoke run of this VM (see data/SOURCE.txt)
TORCH = "torch-tiny-llama-float32-b1-p64-n32"


def load_real() -> dict[str, Any]:
    return json.loads(REAL_RUN.read_text())


def variant(template: dict[str, Any], *, commit: str, day: int, tpot_ms: float | None = None,
            runner_class: str | None = None) -> dict[str, Any]:
    """The real run with another commit and date (and, for series tests, the torch cell's median TPOT set)."""
    d = copy.deepcopy(template)
    d["commit_info"]["id"] = commit
    d["datetime"] = (dt.datetime(2026, 1, 1, 2, 17, tzinfo=dt.timezone.utc) + dt.timedelta(days=day)).isoformat()
    if runner_class:
        d["machine_info"]["perfsuite"]["runner_class"] = runner_class
        for b in d["benchmarks"]:
            b["extra_info"]["runner_class"] = runner_class
    if tpot_ms is not None:
        for b in d["benchmarks"]:
            info = b["extra_info"]
            if info["cell"]["id"] == TORCH and info["metric"] == "tpot":
                info["median_tpot_ms"] = tpot_ms
    return d


def write(directory: Path, name: str, data: Any) -> Path:
    p = directory / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p
