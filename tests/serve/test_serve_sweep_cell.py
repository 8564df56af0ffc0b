"""Sweep cells (``sweep = [rates]`` on a point; the nightly serving table) and the serving rows of `perfsuite run`'s
table: a sweep runs in every server start, records its fixed first point for the gate and lands its knee in
extra_info, the run table and the report's plot. Against the in-thread stub server: seconds, no vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from stub_started import started_stub  # tests/serve is on sys.path (prepend import mode)

from perfsuite.adapters.cli import _serving_table as table
from perfsuite.facts import identity_hash
from perfsuite.measure.serving import cell as sc
from perfsuite.measure.serving.point import point_from
from perfsuite.measure.serving.sweep import sweep_cell_point
from perfsuite.orchestrate.report import serving_plot as plot

ROOT = Path(__file__).resolve().parents[2]
RUN = json.loads((Path(__file__).parent / "data" / "serving_run.json").read_text())


def test_a_sweep_point_names_itself_and_a_plain_point_changed_only_by_its_draw():
    plain = RUN["benchmarks"][0]["extra_info"]["cell"]
    c = sc.ServeCell("tiny-llama", "float32", True, point_from({"load": "poisson:4", "num_prompts": 16}))
    # recorded before sweeps existed, and before send times were drawn as vLLM draws them: that draw is part of
    # the identity now (another schedule is another workload), and nothing else about the point changed
    d = c.as_dict()
    assert d["point"]["arrivals"] == "mt19937-as-vllm" and d["options_hash"] != plain["options_hash"]
    old = {k: v for k, v in d["point"].items() if k != "arrivals"}
    assert identity_hash({"point": old, "prefix_caching": True, "device": "cpu"},
                         separators=(", ", ": ")) == plain["options_hash"]
    closed = sc.ServeCell("tiny-llama", "float32", True, point_from({"load": "closed:4", "num_prompts": 16}))
    assert "arrivals" not in closed.as_dict()["point"]  # nothing is drawn
    s = point_from({"load": "poisson:2", "sweep": [4, 8.5], "num_prompts": 16})
    assert s.sweep == (4.0, 8.5) and s.slug.endswith("-poisson-r2-n16-sweep8.5")
    assert s.as_dict()["sweep"] == [4.0, 8.5]


@pytest.mark.parametrize(("table_", "msg"), [({"load": "closed:4", "sweep": [8]}, "open-loop"),
                                              ({"load": "poisson:4", "sweep": [2, 8]}, "above"),
                                              ({"load": "poisson:2", "sweep": [8, 4]}, "rising"),
                                              ({"load": "poisson:2", "sweep": "8"}, "list of request rates")])
def test_bad_sweeps_are_one_line(table_, msg):
    with pytest.raises(ValueError, match=msg):
        point_from(table_, "points[0]")


def _result(rate, thr, failure=None):
    return {"point": {"load": {"rate": rate}}, "metrics": {"request_throughput": thr, "output_throughput": thr * 16,
            "median_ttft_ms": 1.0, "median_tpot_ms": 1.0, "p99_ttft_ms": 2.0, "p99_tpot_ms": 2.0},
            "failure": failure, "records": [rate], "samples": {}, "prometheus": {}}


def test_sweep_cell_point_records_the_fixed_point_and_stops_at_saturation():
    achieved = {2.0: 2.0, 4.0: 3.9, 8.0: 5.0, 16.0: 5.1}
    seen = []

    def run(p):
        assert p.sweep == ()  # each point is a plain point
        seen.append(p.load.rate)
        return _result(p.load.rate, achieved[p.load.rate])

    r = sweep_cell_point(run, point_from({"load": "poisson:2", "sweep": [4, 8, 16]}))
    assert seen == [2.0, 4.0, 8.0] and r["point"]["load"]["rate"] == 2.0 and r["records"] == [2.0]
    assert r["sweep"]["knee_rate"] == 4.0 and "fell behind" in r["sweep"]["stopped"]
    assert all("records" not in p for p in r["sweep"]["points"])
    failed = sweep_cell_point(lambda p: _result(p.load.rate, 0.0, "3 of 16 requests failed"),
                              point_from({"load": "poisson:2", "sweep": [4]}))
    assert failed["failure"] and failed["sweep"]["knee_rate"] is None  # the fixed point failing fails the cell


def test_a_sweep_cell_end_to_end_on_the_stub(monkeypatch, tmp_path):
    from perfsuite.adapters.cli.run import table as run_table
    from perfsuite.adapters.pytest import serving as record

    monkeypatch.setenv("STUB_MAX_INFLIGHT", "1")  # one request at a time, ~35 ms each: saturates near 28 req/s
    monkeypatch.setattr(sc, "started_server", started_stub)
    conf = sc.parse({"server_starts": 2, "points": [{"load": "constant:8", "sweep": [16, 32, 64], "num_prompts": 8,
                                                      "warmup": 1, "input_len": 8, "output_len": 16}]}, "t")
    runs = sc.measure(list(conf.cells), conf, tmp_path, seed=0)
    (cr,) = runs.values()
    assert cr.error is None and len(cr.replicates) == 2
    benches = []
    for metric in ("ttft", "tpot", "itl", "e2el"):
        bm = SimpleNamespace(extra_info={}, disabled=True)
        req = SimpleNamespace(node=SimpleNamespace(originalname=f"test_{metric}_under_load", nodeid=metric))
        sess = SimpleNamespace(runner_class="rc", settings=SimpleNamespace(profile=SimpleNamespace(name="nightly")))
        info = record.record(sess, cr, conf, bm, req)  # type: ignore[arg-type]
        benches.append({"name": metric, "extra_info": info, "stats": {"median": 1.0}})
    sw = benches[0]["extra_info"]["sweep"]
    # The stub serves one request at a time (~35 ms each), so no machine keeps up with 32 req/s; a slow one falls
    # behind earlier. What holds on every machine: the sweep stopped at a rate of its ladder, and the knee is the
    # rate before it.
    ladder = [8.0, 16.0, 32.0, 64.0]
    stop_rate = float(sw["stopped"].split()[1])
    assert sw["stopped"].startswith("at ") and stop_rate in ladder[1:3]
    assert sw["knee_rate"] == ladder[ladder.index(stop_rate) - 1]
    assert len(sw["knee_rate_per_start"]) == 2 and all("sweep" in p for p in benches[0]["extra_info"]["processes"])
    assert benches[0]["extra_info"]["cell"]["point"]["load"]["rate"] == 8.0  # the gate sees the fixed point
    assert benches[0]["extra_info"]["client_cpus"] is None  # recorded; the stub server has no cores of its own
    lines = run_table({"benchmarks": benches}, None)
    assert lines[0].split()[:7] == ["serving", "cell", *table.COLUMNS[:5]]
    assert any("knee" in ln and "req/s" in ln for ln in lines)
    curves = plot.curves([{"benchmarks": benches}])
    # one curve point per measured rung, the stopping rung included (8 and 16 at the least)
    assert any("sweep (knee" in k and len(v) == len(sw["points"]) >= 2 for k, v in curves.items())


def test_run_table_shows_every_median_and_the_throughputs_of_a_serving_cell():
    lines = table.rows(RUN, RUN)
    head, row = lines[0].split(), lines[2].split()
    assert head[2:8] == list(table.COLUMNS)
    cid = RUN["benchmarks"][0]["extra_info"]["cell"]["id"]
    ttft = RUN["benchmarks"][0]["extra_info"]
    assert row[0] == cid and float(row[1]) == pytest.approx(ttft["median_ttft_ms"], abs=1e-3)
    assert float(row[5]) == pytest.approx(ttft["request_throughput"], abs=1e-3) and row[7:] == ["+0.0%", "+0.0%"]
    assert row[3] == "—"  # this run recorded no ITL test
    assert table.rows({"benchmarks": []}) == []


def test_the_repository_nightly_table_is_a_sweep():
    conf = sc.load(ROOT / "pyproject.toml", "nightly")
    assert conf.cells and all(c.point.sweep for c in conf.cells)


def test_run_table_keeps_engine_and_serving_cells_apart():
    from perfsuite.adapters.cli.run import table as run_table

    engine = {"name": "test_ttft[torch-x]", "extra_info": {"cell": {"id": "torch-x"}, "metric": "ttft",
                                                            "median_ttft_ms": 1.5}, "stats": {"median": 0.0015}}
    lines = run_table({"benchmarks": [engine, *RUN["benchmarks"]]}, None)
    split = lines.index("")
    cid = RUN["benchmarks"][0]["extra_info"]["cell"]["id"]
    assert any(ln.startswith("torch-x") for ln in lines[:split]) and not any(cid in ln for ln in lines[:split])
    assert lines[split + 1].startswith("serving cell") and any(ln.startswith(cid) for ln in lines[split:])
