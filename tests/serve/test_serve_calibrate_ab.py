"""``perfsuite calibrate`` and ``perfsuite ab`` on serving cells, where a replicate is a server start: calibrate's
levels and MDE from starts (its gate MDE for the profile's server_starts), ab's pairs as two starts, each from its
side's own tree (perfsuite.measure.serving.replicate), against the stub server (tests/serve/stub_started.py)."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from stub_started import started_stub  # tests/serve is on sys.path (prepend import mode)

from perfsuite.cli import main as cli
from perfsuite.facts import vocabulary
from perfsuite.measure.serving import cell as sc
from perfsuite.measure.serving.cell import CellRuns, Replicate
from perfsuite.orchestrate import serving_calibrate as scal
from perfsuite.verdict.policy import load_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PYPROJECT = """
[tool.perfsuite]
[tool.perfsuite.profiles.smoke]
backends = ["torch"]
models = ["tiny-llama"]
[tool.perfsuite.serving.smoke]
points = [{ load = "constant:40", num_prompts = 6, warmup = 1, input_len = 8, output_len = 8 }]
"""
TINY = {"points": [{"load": "constant:40", "num_prompts": 6, "warmup": 1, "input_len": 8, "output_len": 8}]}


def _fake_measure(between_cv: float, seed: int = 0):
    rng = np.random.default_rng(seed)

    def run(cells, conf, cache, seed=None, say=None):
        out = {c.id: CellRuns(c) for c in cells}
        for s in range(conf.server_starts):
            level = 10.0 * math.exp(rng.normal(0, math.log1p(between_cv)))  # this start's level
            for c in cells:
                vals = list(level * np.exp(rng.normal(0, 0.05, 200)))
                out[c.id].replicates.append(Replicate(s, 1, 1.0, {"samples": {f"{m}_ms": vals for m in
                                                                               vocabulary.LATENCIES}}))
        return out

    return run


def test_levels_come_from_starts_and_the_gate_mde_from_the_profiles_starts(monkeypatch):
    from perfsuite.verdict import sequential

    monkeypatch.setattr(sequential, "pairs_needed", lambda *a, **kw: 7)  # its simulation is tested on its own
    conf = sc.parse(TINY, "t")
    config = load_config(ROOT / "pyproject.toml")
    vals, wall = scal.measure(conf.cells, conf, runs=4, starts=6, gap_s=0, seed=0, measure_fn=_fake_measure(0.2))
    one = scal.report(vals, config, 6, wall, gate_starts=1)["cells"][conf.cells[0].id]["ttft"]
    many = scal.report(vals, config, 6, wall, gate_starts=6)["cells"][conf.cells[0].id]["ttft"]
    assert 0.1 < one["cv_between_processes"] < 0.35  # the starts' spread (20 %), not the requests' (5 %)
    assert one["cv_within_process"] == pytest.approx(0.05, abs=0.01)
    assert many["gate_mde"] < one["gate_mde"]  # more starts per gated run: a smaller detectable change
    assert one["ab"]["5%"]["pairs_80pct"] == 7
    assert "server start" in scal.format_lines(scal.report(vals, config, 6, wall, 1))[0]


def test_calibrate_runs_serving_cells_on_server_starts(monkeypatch, tmp_path, capsys):
    starts = []

    def counted(*a, **kw):
        starts.append(1)
        return started_stub(*a, **kw)

    monkeypatch.setattr(sc, "started_server", counted)
    real_load = sc.load
    monkeypatch.setattr(sc, "load", lambda p, profile: sc.parse(TINY, "t") if profile == "pr" else real_load(p, profile))
    out = tmp_path / "c.json"
    assert cli(["calibrate", "--profile", "pr", "--cells", "vllm-serve-*", "--runs", "2", "--workers", "2",
                "--json", str(out)]) == 0
    assert len(starts) == 4  # 2 runs x 2 starts
    rep = json.loads(out.read_text())["serving"]
    assert rep["replicate"] == "server start" and rep["workers"] == 2 and rep["gate_server_starts"] == 1
    (cell,) = rep["cells"].values()
    assert set(cell) == set(vocabulary.LATENCIES) and all(math.isfinite(d["gate_mde"]) for d in cell.values())
    assert "serving cells: a replicate is a server start" in capsys.readouterr().out


def test_calibrate_default_cells_leave_serving_out(monkeypatch):
    conf = sc.parse(TINY, "t")
    from perfsuite.measure.serving.replicate import select

    assert select(conf, {"cells": "*"}) == [] and select(conf, {"cells": "vllm-serve-*"}) == list(conf.cells)
    assert select(conf, {"cells": "vllm-serve-*", "backend": "torch"}) == []
    assert select(conf, {"cells": "vllm-serve-*", "model": "tiny-opt"}) == []


@pytest.mark.slow
def test_ab_pairs_server_starts_from_each_sides_tree(tmp_path):
    trees = {}
    for s in ("a", "b"):  # two checkouts of this perfsuite, each with a smoke serving table
        trees[s] = tmp_path / s
        shutil.copytree(ROOT / "perfsuite", trees[s] / "perfsuite", ignore=shutil.ignore_patterns("__pycache__"))
        (trees[s] / "pyproject.toml").write_text(PYPROJECT)
    py = tmp_path / "python"  # the real interpreter, with vLLM's server replaced by the stub for the replicates
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'stub_started.py'} \"$@\"\n")
    py.chmod(0o755)
    out = tmp_path / "ab.json"
    rc = cli(["ab", "--a", str(trees["a"]), "--b", str(trees["b"]), "--a-python", str(py), "--b-python", str(py),
              "--a-env", "STUB_ITL_S=0.002", "--b-env", "STUB_ITL_S=0.008", "--cells", "vllm-serve-*",
              "--budget", "3m", "--seed", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    assert rc == 1 and data["stopped"] == "regression", data["verdicts"]
    tpot = next(v for v in data["verdicts"] if v["metric"] == "median_tpot_ms")
    assert tpot["cell"].startswith("vllm-serve-") and tpot["kind"] == "regression" and tpot["ratio"] > 2
    for pair in data["pairs"]:
        assert Path(pair["perfsuite_file"]["A"]).is_relative_to(trees["a"])
        assert Path(pair["perfsuite_file"]["B"]).is_relative_to(trees["b"])
        assert pair["pid"]["A"] != pair["pid"]["B"]  # two starts
    assert {p["order"] for p in data["pairs"]} == {"AB", "BA"} or len(data["pairs"]) < 6


def test_a_failed_start_on_one_side_is_one_line(tmp_path):
    from perfsuite.measure.serving import replicate
    from perfsuite.measure.worker.pool import Side

    py = tmp_path / "python"
    msg = {"error": "vLLM server (tiny-llama, port 1) exited with status 1\nthe log's tail"}
    py.write_text(f"#!{sys.executable}\nprint({json.dumps(json.dumps(msg))})\n")
    py.chmod(0o755)
    side = Side(ROOT, str(py), "B")
    pr = replicate.measure(side, {"id": "vllm-serve-x"}, "pr", 3, "B")
    assert pr.error == "vLLM server (tiny-llama, port 1) exited with status 1"
    from perfsuite.facts.errors import UsageError

    with pytest.raises(UsageError, match=r"side B, pair 3, vllm-serve-x: server start failed"):
        replicate.measure_or_fail(side, {"id": "vllm-serve-x"}, "pr", 3, "B")


def test_a_tree_without_serving_replicates_lists_no_serving_cells(tmp_path):
    from perfsuite.measure.serving import replicate
    from perfsuite.measure.worker.pool import Side

    old = tmp_path / "old"
    (old / "perfsuite" / "serve").mkdir(parents=True)
    assert replicate.cells(Side(old, sys.executable, "A"), {"cells": "vllm-serve-*"}) == []
    assert replicate.cells(Side(ROOT, sys.executable, "B"), {"cells": "*"}) == []  # the default: engine cells only
