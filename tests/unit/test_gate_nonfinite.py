"""A stored run with a NaN or an infinity in its samples: left out of the baseline for that metric and named (file,
metric), never allowed to turn a verdict into "inconclusive" (which passes a real regression)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_gate_cli import run_json, write  # tests/unit is on sys.path (rootdir conftest, prepend import mode)

from perfsuite.cli import main as cli
from perfsuite.orchestrate import baselines
from perfsuite.verdict.screen import GateSession


@pytest.fixture(autouse=True)
def _no_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def poisoned(tmp_path: Path) -> tuple[Path, Path]:
    """Six baseline runs; in 0004 one process of test_tpot has one NaN sample (and one +inf in ttft's)."""
    rng = np.random.default_rng(0)
    for i in range(1, 7):
        run = run_json(rng)
        if i == 4:
            tpot = next(b for b in run["benchmarks"] if b["name"].startswith("test_tpot"))
            tpot["extra_info"]["processes"][2]["samples"]["tpot_ms"][1] = float("nan")
        write(tmp_path / "base" / f"{i:04d}_smoke.json", run)
    return tmp_path / "base", tmp_path / "base" / "0004_smoke.json"


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_a_nonfinite_sample_does_not_pass_a_regression(poisoned: tuple[Path, Path], tmp_path: Path, bad: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    base, bad_file = poisoned
    if bad != "nan":
        text = bad_file.read_text().replace("NaN", "Infinity" if bad == "inf" else "-Infinity")
        bad_file.write_text(text)
    cur = write(tmp_path / "cur.json", run_json(np.random.default_rng(1), scale=3.14))
    code = cli(["compare", str(base), str(cur), "--json", str(tmp_path / "v.json")])
    out = capsys.readouterr().out
    assert code == 1, out
    [tpot] = [v for v in json.loads((tmp_path / "v.json").read_text()) if v["metric"] == "median_tpot_ms"]
    assert tpot["kind"] == "regression" and tpot["n_baseline"] == 5, tpot
    assert f"left out {bad_file} for median_tpot_ms: non-finite value" in tpot["note"], tpot["note"]
    assert f"left out {bad_file} for median_tpot_ms" in out


def test_the_gate_in_pytest_names_the_file_too(poisoned: tuple[Path, Path], tmp_path: Path) -> None:
    base, bad_file = poisoned
    runs = baselines.read_runs(base, "cpu-x-2c")
    gate = GateSession(runs)
    cur = run_json(np.random.default_rng(1), scale=3.14)
    tpot = next(b for b in cur["benchmarks"] if b["name"].startswith("test_tpot"))
    verdicts = gate.check(tpot["fullname"], tpot["extra_info"], tpot["stats"])
    [v] = [v for v in verdicts if v.metric == "median_tpot_ms"]
    assert v.kind == "regression" and f"left out {bad_file} for median_tpot_ms" in v.note, v
