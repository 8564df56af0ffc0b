"""``perfsuite compare`` on small synthetic run files: exit codes 0/1/2 and one-line messages for corrupt or
foreign baselines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfsuite.cli import main as cli

NAMES = ("test_ttft", "test_tpot")
CELL = "torch-tiny-llama-float32-b1-p64-n32"


def run_json(rng: np.random.Generator, scale: float = 1.0, *, runner: str = "cpu-x-2c", schema: int = 1,
             tokens: int = 155, sd_run: float = 0.01, workers: int = 6) -> dict:
    run_eff = rng.normal(0, sd_run)
    benches = []
    for n in NAMES:
        metric = n.split("_")[1]
        key = "ttft_ms" if metric == "ttft" else "tpot_ms"
        procs = [{"samples": {key: list((40.0 if metric == "ttft" else 3.4) * scale
                                        * np.exp(run_eff + rng.normal(0, 0.02) + rng.normal(0, 0.01, 5)))}}
                 for _ in range(workers)]
        gen = [x for p in procs for x in p["samples"][key]]
        info = {"cell": {"id": CELL}, "metric": metric, "samples": {key: gen}, "processes": procs,
                f"median_{key}": float(np.median(gen)), "generated_tokens": tokens,
                "measured_by": {"profile": "smoke", "worker_processes": workers}}
        benches.append({"name": f"{n}[{CELL}]", "fullname": f"tests/perf/test_latency.py::{n}[{CELL}]",
                        "stats": {"median": float(np.median(gen)) / 1e3}, "extra_info": info})
    return {"machine_info": {"perfsuite": {"schema_version": schema, "runner_class": runner}},
            "benchmarks": benches}


def write(path: Path, data: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.fixture
def base_dir(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for i in range(1, 7):
        write(tmp_path / "base" / f"{i:04d}_smoke.json", run_json(rng))
    return tmp_path / "base"


@pytest.fixture(autouse=True)
def _no_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # defaults, not the checkout's [tool.perfsuite.gate]


def test_compare_unchanged_exits_0(base_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cur = write(tmp_path / "cur.json", run_json(np.random.default_rng(1)))
    assert cli(["compare", str(base_dir), str(cur)]) == 0
    out = capsys.readouterr().out
    assert "median_tpot_ms" in out and "MDE" in out and "p(Holm)" in out


def test_compare_regression_exits_1(base_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cur = write(tmp_path / "cur.json", run_json(np.random.default_rng(1), scale=1.25))
    assert cli(["compare", str(base_dir), str(cur), "--json", str(tmp_path / "v.json")]) == 1
    captured = capsys.readouterr()
    assert "REGRESSION" in captured.out and "regression" in captured.err
    verdicts = json.loads((tmp_path / "v.json").read_text())
    assert {v["kind"] for v in verdicts} >= {"regression"}


def test_compare_token_count_change_exits_1(base_dir: Path, tmp_path: Path) -> None:
    cur = write(tmp_path / "cur.json", run_json(np.random.default_rng(1), tokens=150))
    assert cli(["compare", str(base_dir), str(cur)]) == 1


def test_compare_folder_of_current_runs(base_dir: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    for i in range(1, 4):
        write(tmp_path / "cur" / f"{i:04d}_x.json", run_json(rng))
    assert cli(["compare", str(base_dir), str(tmp_path / "cur")]) == 0


@pytest.mark.parametrize(("content", "needle"), [
    ("{not json", "not valid JSON"),
    ({"machine_info": {}}, "no 'benchmarks' list"),
    ({"machine_info": {}, "benchmarks": []}, "not written by perfsuite"),
    ({"machine_info": {"perfsuite": {"schema_version": 1, "runner_class": "cpu-x-2c"}}, "benchmarks": []},
     "empty"),
    ("schema2", "newer"),
])
def test_compare_rejects_bad_baseline(tmp_path: Path, capsys: pytest.CaptureFixture, content, needle) -> None:
    if content == "schema2":
        content = run_json(np.random.default_rng(0), schema=2)
    base = write(tmp_path / "b.json", content if isinstance(content, str) else json.dumps(content))
    cur = write(tmp_path / "cur.json", run_json(np.random.default_rng(1)))
    assert cli(["compare", str(base), str(cur)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfsuite compare: ") and needle in err and "\n" not in err and str(base) in err


def test_compare_rejects_foreign_runner_class(base_dir: Path, tmp_path: Path, capsys) -> None:
    cur = write(tmp_path / "cur.json", run_json(np.random.default_rng(1), runner="rocm-gfx942-mi300x"))
    assert cli(["compare", str(base_dir), str(cur)]) == 2
    err = capsys.readouterr().err.strip()
    assert "rocm-gfx942-mi300x" in err and "cpu-x-2c" in err and "\n" not in err


def test_compare_missing_path_and_no_common_benchmark(base_dir: Path, tmp_path: Path, capsys) -> None:
    assert cli(["compare", str(tmp_path / "nope"), str(base_dir)]) == 2
    other = run_json(np.random.default_rng(1))
    for b in other["benchmarks"]:
        b["fullname"] = b["name"] = "test_other[x]"
    assert cli(["compare", str(base_dir), str(write(tmp_path / "o.json", other))]) == 2
    assert "nothing gated" in capsys.readouterr().err


def test_compare_measured_differently_is_not_a_regression(base_dir: Path, tmp_path: Path, capsys) -> None:
    cur = run_json(np.random.default_rng(1), scale=1.5, workers=3)
    assert cli(["compare", str(base_dir), str(write(tmp_path / "cur.json", cur))]) == 0
    assert "incomparable" in capsys.readouterr().out


def test_compare_bad_policy_exits_2(base_dir: Path, tmp_path: Path, capsys) -> None:
    cfg = write(tmp_path / "pyproject.toml", "[tool.perfsuite.gate]\nalpha = 2\n")
    cur = write(tmp_path / "cur.json", run_json(np.random.default_rng(1)))
    assert cli(["compare", str(base_dir), str(cur), "--config", str(cfg)]) == 2
    assert "alpha" in capsys.readouterr().err
