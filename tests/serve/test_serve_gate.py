"""The gate reads serving entries like every cell's: one value per server start from extra_info["processes"]."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

from perfsuite.verdict import values
from perfsuite.verdict.policy import parse_config
from perfsuite.verdict.runs import compare_runs

RUN = json.loads((Path(__file__).parent / "data" / "serving_run.json").read_text())  # a real pr serving run


def _run(seed: int, scale: float, starts: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    run = copy.deepcopy(RUN)
    for b in run["benchmarks"]:
        info = b["extra_info"]
        key = f"{info['metric']}_ms"
        base = info["processes"][0]["samples"][key]
        info["processes"] = [{**info["processes"][0], "index": i,
                              "samples": {key: list(np.array(base) * scale * rng.lognormal(0, 0.02))}}
                             for i in range(starts)]
        info["measured_by"]["worker_processes"] = starts
    return run


def test_process_values_are_one_per_server_start():
    b = _run(0, 1.0)["benchmarks"][0]
    assert b["extra_info"]["cell"]["backend"] == "vllm-serve"
    assert len(values.process_values(b, "median_ttft_ms")) == 3


def test_a_slower_serving_run_fails_the_gate_and_an_equal_one_passes():
    config = parse_config({"alpha": 0.01, "baseline_runs": 10})
    base = [_run(s, 1.0) for s in range(8)]
    slow = compare_runs(base, [_run(99, 1.4)], config)
    assert slow and all(v.metric in ("median_ttft_ms", "median_tpot_ms") for v in slow)
    assert all(v.failed for v in slow)
    same = compare_runs(base, [_run(100, 1.0)], config)
    assert not any(v.failed for v in same)
