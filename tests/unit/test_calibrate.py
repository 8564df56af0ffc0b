"""``perfsuite calibrate`` predicts ``ab``'s pairs from A/A lockstep pairs (what ab measures), not from the spread of
processes run one after the other, which includes the drift lockstep cancels."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_ab_cli import make_tree  # tests/unit is on sys.path (rootdir conftest, prepend import mode)

from perfsuite.verdict import sequential
from perfsuite.verdict.noise import decompose, format_report
from perfsuite.verdict.policy import load_config


def _values(rng: np.random.Generator, sd_process: float) -> dict:
    """3 runs x 6 processes of one cell's tpot, log-normal around 7 ms with ``sd_process`` between processes."""
    runs = [[(float(v), [float(v)] * 3) for v in np.exp(np.log(7.0) + rng.normal(0, sd_process, 6))] for _ in range(3)]
    return {"cell": {"tpot": runs}}


def test_ab_is_predicted_from_the_lockstep_pairs_when_there_are_three_or_more() -> None:
    config = load_config(None)
    rng = np.random.default_rng(1)
    values = _values(rng, 0.10)
    pairs = list(rng.normal(0, 0.03, 12))
    rep = decompose(values, config, 6, 3.0, pairs={"cell": {"tpot": pairs}}, pair_wall_s=6.0)["cells"]["cell"]["tpot"]
    assert rep["ab_model"] == "lockstep" and rep["lockstep_pairs"] == 12
    assert rep["sd_log_pair"] == pytest.approx(float(np.std(pairs, ddof=1)))
    tau, eps = math.log1p(config.ab_threshold), math.log1p(config.ab_margin)
    want = sequential.pairs_needed(rep["sd_log_pair"], math.log1p(0.05), config.alpha / 3, tau, eps)
    assert rep["ab"]["5%"]["pairs_80pct"] == want
    assert rep["ab"]["5%"]["minutes_80pct"] == pytest.approx(want * 6.0 / 60)
    # the sequential model is kept beside it, and with pairs 3x tighter than sqrt(2) x the process spread it asks for
    # more pairs
    assert rep["sd_log_pair_sequential"] > 2 * rep["sd_log_pair"]
    assert rep["ab_sequential"]["5%"]["pairs_80pct"] > want
    lines = format_report({"workers": 6, "process_wall_s": 3.0, "cells": {"cell": {"tpot": rep}}})
    assert any("12 A/A lockstep pairs" in ln for ln in lines), lines
    assert f"{math.expm1(rep['sd_log_pair']):.1%}" in lines[3]


def test_fewer_than_three_pairs_fall_back_to_the_sequential_model() -> None:
    config = load_config(None)
    rng = np.random.default_rng(2)
    for pairs in (None, {"cell": {"tpot": [0.01, -0.02]}}):
        rep = decompose(_values(rng, 0.05), config, 6, 3.0, pairs=pairs)["cells"]["cell"]["tpot"]
        assert rep["ab_model"] == "sequential" and rep["sd_log_pair"] is None
        assert rep["ab"] == rep["ab_sequential"]
        assert rep["ab"]["5%"]["minutes_80pct"] is None or rep["ab"]["5%"]["minutes_80pct"] > 0
        lines = format_report({"workers": 6, "process_wall_s": 3.0, "cells": {"cell": {"tpot": rep}}})
        assert any("sqrt(2) x the between-process spread" in ln for ln in lines), lines


def _calibrate(tree: Path, *args: str, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree), **({"TMPDIR": str(tmp)} if tmp else {})}
    return subprocess.run([sys.executable, "-m", "perfsuite.cli", "calibrate", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600)


def _calibrate_here(tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                    *args: str) -> tuple[int, str]:
    """The command in this process (its refusals come before any worker; an interpreter costs ~2 s here)."""
    from perfsuite.cli import main

    monkeypatch.chdir(tree)
    try:
        rc = main(["calibrate", *args])
    except SystemExit as exc:  # argparse's usage error: what the process exits with
        rc = exc.code if isinstance(exc.code, int) else 1
    return rc, capsys.readouterr().err


def test_negative_pairs_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _calibrate_here(make_tree(tmp_path / "t"), monkeypatch, capsys, "--pairs", "-1")
    assert rc == 2 and "--pairs must be >= 0" in err, err


def test_a_thread_mode_that_is_no_count_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _calibrate_here(make_tree(tmp_path / "t"), monkeypatch, capsys, "--threads", "two")
    assert rc == 2 and "'two'" in err and "a thread count such as 1" in err, err



def test_calibrate_waits_for_another_measuring_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """calibrate measures, so it takes the suite lock an ordinary run takes; PERFSUITE_LOCK_WAIT_S=0 refuses at
    once, in one line, before any worker of the measurement starts."""
    from perfsuite.machine.preflight import SuiteLock

    monkeypatch.setenv("PERFSUITE_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.setenv("PERFSUITE_LOCK_WAIT_S", "0")
    with SuiteLock(exclusive=False, measuring=True, directory=tmp_path / "lock"):
        rc, err = _calibrate_here(make_tree(tmp_path / "t"), monkeypatch, capsys, "--runs", "2")
    assert rc == 2 and err.startswith("perfsuite calibrate: another perfsuite run is measuring on this machine"), err
    assert "\n" not in err.strip(), err

@pytest.mark.slow
def test_calibrate_measures_lockstep_pairs_and_leaves_nothing_behind(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", generations=2)
    tmp = tmp_path / "tmp"  # its own temporary folder: other tests' lockstep pairs may run beside it (xdist)
    tmp.mkdir()
    res = _calibrate(tree, "--runs", "2", "--workers", "2", "--pairs", "2", "--threads", "1",
                     "--json", str(tmp_path / "c.json"), tmp=tmp)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["pair_threads"]["threads"] == 1  # the pairs predict ab, so they run at ab's thread choice
    assert "A/A pairs: threads: both sides measured with OMP_NUM_THREADS=1" in res.stdout
    cell = next(iter(report["cells"].values()))
    for m in ("ttft", "tpot", "e2el"):
        d = cell[m]
        assert d["ab_model"] == "lockstep" and d["lockstep_pairs"] == 4, d
        assert d["sd_log_pair"] is not None and math.isfinite(d["sd_log_pair"]) and d["sd_log_pair"] >= 0
    assert "4 A/A lockstep pairs per cell" in res.stdout
    assert not list(tmp.glob("psl-*"))  # the pairs' socket folders are gone
