"""Output and cache locations are checked once, before any work: an unwritable ``--out``/``--json`` or
``PERFSUITE_CACHE_DIR`` is one line naming the option or variable and the fix (exit 2), not a traceback later."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ab_cli import make_tree  # tests/unit is on sys.path (rootdir conftest, prepend import mode)

from perfsuite.cli import main as cli
from perfsuite.machine import precheck

BAD = "/proc/perfsuite-nope"


def _one_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"perfsuite {command}: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("argv", "named"), [
    (["report", "--no-history", "--run", "x.json", "--out", BAD], "--out"),
    (["ops", "--ops", "silu", "--classes", "unit", "--out", BAD], "--out"),
    (["compare", "base", "cur.json", "--json", f"{BAD}/v.json"], "--json"),
    (["history", "export", "--db", "h.sqlite", "--out", f"{BAD}/h.csv"], "--out"),
])
def test_an_unwritable_output_is_one_line(argv: list[str], named: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli(argv) == 2
    err = _one_line(capsys, argv[0])
    assert f"{named} {BAD}" in err and "not writable" in err and "writable" in err.split(";")[-1], err


def test_an_unwritable_cache_is_named_before_any_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    a, b = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    monkeypatch.setenv("PERFSUITE_CACHE_DIR", BAD)
    assert cli(["ab", "--a", str(a), "--b", str(b), "--budget", "1m"]) == 2
    err = _one_line(capsys, "ab")
    assert f"PERFSUITE_CACHE_DIR={BAD}" in err and "set PERFSUITE_CACHE_DIR to a writable folder" in err, err


def test_the_cache_location_says_where_it_comes_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFSUITE_CACHE_DIR", str(tmp_path / "env"))
    assert precheck.cache_location(None) == (tmp_path / "env", "PERFSUITE_CACHE_DIR")
    assert precheck.cache_location(tmp_path / "cfg") == (tmp_path / "cfg", "[tool.perfsuite] cache_dir")
    monkeypatch.delenv("PERFSUITE_CACHE_DIR")
    path, named = precheck.cache_location(None)
    assert path.name == "perfsuite" and named == precheck.DEFAULT_CACHE


@pytest.mark.slow
def test_the_plugin_refuses_an_unwritable_cache_before_measuring(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PERFSUITE_CACHE_DIR": BAD, "PYTHONPATH": str(root)}
    p = subprocess.run([sys.executable, "-m", "pytest", "tests/perf", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                        "-k", "tpot and torch", f"--benchmark-json={tmp_path / 'run.json'}"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 4, p.stdout[-2000:] + p.stderr[-2000:]
    assert f"perfsuite: PERFSUITE_CACHE_DIR={BAD}: /proc is not writable" in p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr and "worker" not in p.stdout
