"""Serving cells: the config table, ids, the /metrics consistency check (fast); real vLLM failure paths (slow)."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from perfsuite.measure.serving import cell as sc
from perfsuite.measure.serving.cell import prometheus_problem

POINTS = [{"load": "poisson:2", "num_prompts": 8}, {"load": "closed:2", "num_prompts": 4, "output_len": 8}]


def test_parse_makes_cells_per_model_prefix_caching_and_point():
    conf = sc.parse({"models": ["tiny-llama"], "prefix_caching": [True, False], "points": POINTS,
                     "server_starts": 2, "goodput": "ttft:100 tpot:20"}, "[t]")
    assert [c.id for c in conf.cells] == [
        "vllm-serve-tiny-llama-float32-pc-random-i64-o16-poisson-r2-n8",
        "vllm-serve-tiny-llama-float32-pc-random-i64-o8-closed-c2-n4",
        "vllm-serve-tiny-llama-float32-nopc-random-i64-o16-poisson-r2-n8",
        "vllm-serve-tiny-llama-float32-nopc-random-i64-o8-closed-c2-n4"]
    assert len({c.server_key for c in conf.cells}) == 2
    assert conf.server_starts == 2 and conf.goodput == {"ttft": 100.0, "tpot": 20.0}
    a, b = conf.cells[0].as_dict()["options_hash"], conf.cells[2].as_dict()["options_hash"]
    assert a != b  # prefix caching changes what runs: runs of the two never compare
    assert sc.parse({}, "[t]").cells == ()


@pytest.mark.parametrize("table,msg", [
    ({"points": POINTS, "bogus": 1}, "bogus: unknown key"),
    ({"points": [{"load": "poisson:2", "rate": 3}]}, "unknown key 'rate'"),
    ({"points": [{"load": "fast"}]}, "load point 'fast'"),
    ({"points": POINTS, "dtype": "int4"}, "dtype"),
    ({"points": POINTS, "server_starts": 0}, "server_starts"),
    ({"points": POINTS, "prefix_caching": ["yes"]}, "prefix_caching"),
    ({"points": POINTS, "goodput": "ttft"}, "goodput SLO"),
])
def test_parse_refuses_bad_tables(table, msg):
    with pytest.raises(ValueError, match=msg):
        sc.parse(table, "[tool.perfsuite.serving.pr]")


def test_load_reads_the_profile_table(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[tool.perfsuite.serving.pr]\npoints = [{ load = "constant:3", num_prompts = 5 }]\n')
    assert [c.point.slug for c in sc.load(p, "pr").cells] == ["random-i64-o16-constant-r3-n5"]
    assert sc.load(p, "smoke").cells == ()


def _runs(count, completed, available=True):
    rep = sc.Replicate(0, 1, 1.0, {"prometheus": {"available": available, "ttft": {"count": count}},
                                   "metrics": {"completed": completed}})
    return sc.CellRuns(sc.parse({"points": POINTS[:1]}, "t").cells[0], [rep])


def test_prometheus_check_fails_on_a_count_mismatch_or_no_metrics():
    assert prometheus_problem(_runs(8, 8)) is None
    assert "counted 7 requests" in prometheus_problem(_runs(7, 8))
    assert "no latency histograms" in prometheus_problem(_runs(8, 8, available=False))


def test_the_repository_pr_table_parses_and_fits_its_budget():
    from pathlib import Path

    conf = sc.load(Path(__file__).parents[2] / "pyproject.toml", "pr")
    assert conf.cells and conf.server_starts >= 1
    assert sum(c.point.load.num_requests / c.point.load.rate for c in conf.cells) < 20  # seconds of load


# ---------------------------------------------------------------------------------- real vLLM, slow
def _procs_of(pids):
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
def test_vllm_bad_model_fails_with_the_log_tail(tmp_path):
    from perfsuite.measure.serving.server import Server, ServerError, free_port, vllm_argv, vllm_env

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"architectures": ["NoSuchForCausalLM"], "model_type": "nosuch"}))
    port = free_port()
    s = Server(vllm_argv(bad, served_name="bad", port=port), port=port, log_path=tmp_path / "v.log",
               env=vllm_env(), start_timeout_s=300, name="vLLM server")
    with pytest.raises(ServerError, match=r"exited with status [1-9]"):
        s.start()
    assert "nosuch" in (tmp_path / "v.log").read_text().lower()
    time.sleep(1)
    assert not _procs_of(s.pids)


@pytest.mark.slow
def test_vllm_killed_mid_load_fails_the_cell_and_leaves_no_process(tmp_path, monkeypatch):
    """SIGKILL of vLLM's API server while a load point runs: the cell fails naming the exit and the log it kept,
    and the engine core and every other process of the server are gone."""
    import tempfile
    import threading

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the kept log folder stays in this test's folder

    conf = sc.parse({"points": [{"load": "constant:4", "num_prompts": 60, "warmup": 1, "output_len": 32}]}, "t")
    seen: list[int] = []

    def killer(line):
        if "healthy" in line:
            def kill():
                time.sleep(3)
                for p in psutil.Process().children():  # only the server this test started
                    if "vllm.entrypoints.openai.api_server" in " ".join(p.cmdline()):
                        seen.append(p.pid)
                        seen.extend(c.pid for c in p.children(recursive=True))
                        os.kill(p.pid, signal.SIGKILL)
            threading.Thread(target=kill, daemon=True).start()

    out = sc.measure(list(conf.cells), conf, None, say=killer)
    err = next(iter(out.values())).error
    assert err and "exited with status -9" in err
    [kept] = tmp_path.glob("perfsuite-serve-*/vllm-*.log")
    assert f"last lines of {kept}" in err
    time.sleep(2)
    assert seen and not _procs_of(seen)


@pytest.mark.slow
def test_a_serving_replicate_from_a_side_starts_real_vllm_and_leaves_no_process():
    """perfsuite ab's serving replicate with vLLM itself: one start from this tree as a side (the pr table's
    poisson:4 cell), the point's samples and /metrics check, no process of the server left after."""
    from pathlib import Path

    from perfsuite.measure.serving import replicate
    from perfsuite.measure.worker.pool import this_side

    conf = sc.load(Path(__file__).resolve().parents[2] / "pyproject.toml", "pr")
    cell = next(c for c in conf.cells if c.point.load.rate == 4.0)
    pr = replicate.measure(this_side("A"), cell.as_dict(), "pr", 0, "A")
    assert pr.error is None, pr.detail
    assert pr.pid > 0 and pr.load_s > 0 and pr.perfsuite_file.startswith(str(this_side().tree))
    assert len(pr.metrics["ttft"].samples["ttft_ms"]) == cell.point.load.num_requests
    assert pr.metrics["tpot"].generated_tokens == cell.point.load.num_requests * cell.point.output_len
    assert pr.backend_info["prometheus"]["ttft"]["count"] == cell.point.load.num_requests
    assert not psutil.pid_exists(pr.pid) or psutil.Process(pr.pid).status() == psutil.STATUS_ZOMBIE
