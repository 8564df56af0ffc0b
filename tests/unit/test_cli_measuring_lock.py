"""The commands that time something here take the suite lock an ordinary pytest run takes (as ``ab``, ``bisect`` and
``calibrate`` do, tests beside theirs), so two perfsuite runs on one machine never slow each other: with another run
measuring and PERFSUITE_LOCK_WAIT_S=0, each refuses in one line naming the command, before it measures anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.machine.preflight import SuiteLock


def _busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          argv: list[str]) -> tuple[int, str]:
    from perfsuite.cli import main

    monkeypatch.setenv("PERFSUITE_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.setenv("PERFSUITE_LOCK_WAIT_S", "0")
    with SuiteLock(exclusive=False, measuring=True, directory=tmp_path / "lock"):
        rc = main(argv)
    return rc, capsys.readouterr().err


def _refused(rc: int, err: str, command: str) -> None:
    assert rc == 2 and err.startswith(f"perfsuite {command}: another perfsuite run is measuring on this machine"), err
    assert "\n" not in err.strip(), err


def test_roofline_waits_for_another_measuring_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"benchmarks": []}))
    rc, err = _busy(tmp_path, monkeypatch, capsys, ["roofline", str(results)])
    _refused(rc, err, "roofline")
    # given both peaks, roofline measures nothing and needs no lock
    rc, err = _busy(tmp_path, monkeypatch, capsys, ["roofline", str(results), "--bandwidth", "1e10", "--flops", "1e11"])
    assert rc == 0, err


def test_serve_waits_for_another_measuring_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # port 9 (discard): nothing is contacted, the refusal comes first
    rc, err = _busy(tmp_path, monkeypatch, capsys, ["serve", "--base-url", "http://127.0.0.1:9", "--model", "m"])
    _refused(rc, err, "serve")


def test_overhead_waits_for_another_measuring_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _busy(tmp_path, monkeypatch, capsys, ["overhead", "--blocks", "1", "--generations", "1"])
    _refused(rc, err, "overhead")
