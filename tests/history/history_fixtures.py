"""Run files for the history tests: the real run of data/ and variants of it (other commits, dates, values)."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).parent / "data"
REAL_RUN = DATA / "run_cpu-intel-xeon-2c_smoke.json"  # a real smoke run of this VM (see data/SOURCE.txt)
TORCH = "torch-tiny-llama-float32-b1-p64-n32"
# The real run was recorded as cpu-intel-xeon-2c, before classes carried the CPU tier; its class today (its
# recorded flags have AMX), as the gate and the history read it.
REAL_CLASS = "cpu-intel-xeon-amx-2c"


def load_real() -> dict[str, Any]:
    return json.loads(REAL_RUN.read_text())


def variant(template: dict[str, Any], *, commit: str, day: int, tpot_ms: float | None = None,
            runner_class: str | None = None, jitter: np.random.Generator | None = None) -> dict[str, Any]:
    """The real run with another commit and date (and, for series tests, the torch cell's median TPOT set;
    ``jitter`` scales every other benchmark's latencies by a small random factor so its series are not flat)."""
    d = copy.deepcopy(template)
    if jitter is not None:
        for b in d["benchmarks"]:
            f = math.exp(jitter.normal(0, 0.015))
            for k, v in b["extra_info"].items():
                if k.endswith("_ms") and isinstance(v, float):
                    b["extra_info"][k] = v * f
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


def nightly_series(directory: Path, *, nights: int, step_at: int, step: float, sigma: float = 0.01,
                   seed: int = 0, base_ms: float = 1.85) -> list[Path]:
    """Files of a nightly history: torch TPOT ``base_ms`` with lognormal noise, ``step`` more from night ``step_at``
    (commit ``NN`` * 20 on night NN)."""
    real = load_real()
    rng = np.random.default_rng(seed)
    out = []
    for day in range(nights):
        tpot = base_ms * ((1 + step) if day >= step_at else 1.0) * math.exp(rng.normal(0, sigma))
        out.append(write(directory, f"n{day:02d}.json", variant(real, commit=f"{day:02d}" * 20, day=day, tpot_ms=tpot,
                                                                jitter=rng)))
    return out


def write(directory: Path, name: str, data: Any) -> Path:
    p = directory / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p
