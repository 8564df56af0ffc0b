"""``--benchmark-compare=NNNN``: pytest-benchmark's table compares with run NNNN only, so the gate does too and says
so (one baseline run: run-to-run drift unknown); a number that matches no stored run is one usage line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = '[tool.perfsuite]\nbaselines_dir = "baselines"\n'


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> tuple[pytest.Pytester, str]:
    """Three stored runs of a committed baseline class (whatever its folder is called now)."""
    monkeypatch.delenv("PERFSUITE_RUNNER_CLASS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    src = sorted(p for d in (ROOT / "baselines").glob("cpu-*") for p in d.glob("0*.json"))[:3]
    assert len(src) == 3, "the committed CPU baselines are needed"
    cls = json.loads(src[0].read_text())["machine_info"]["perfsuite"]["runner_class"]
    pytester.makefile(".toml", pyproject=PYPROJECT)
    (pytester.path / "tests" / "perf").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "perf" / "test_latency.py", pytester.path / "tests" / "perf")
    dest = pytester.path / "baselines" / cls
    dest.mkdir(parents=True)
    for p in src:
        shutil.copy(p, dest / p.name)
    return pytester, cls


def _run(p: pytest.Pytester, cls: str, *args: str) -> pytest.RunResult:
    return p.runpytest_subprocess("tests/perf", "-p", "no:cacheprovider", "-q", "--collect-only",
                                  f"--perf-runner-class={cls}", *args)


def test_compare_with_one_run_makes_the_gate_use_that_run(project: tuple[pytest.Pytester, str]) -> None:
    p, cls = project
    first = sorted((p.path / "baselines" / cls).iterdir())[0].name
    res = _run(p, cls, "--benchmark-compare=0001")
    assert res.ret == 0, res.stderr.str()
    out = res.stdout.str()
    assert (f"perfsuite: --benchmark-compare=0001: the gate compares with {first} only, like pytest-benchmark's "
            "table; one baseline run: run-to-run drift unknown") in out, out
    res = _run(p, cls, "--benchmark-compare")
    assert "--benchmark-compare=" not in res.stdout.str()  # no number: every stored run, as before


def test_compare_with_a_run_that_is_not_there_is_one_line(project: tuple[pytest.Pytester, str]) -> None:
    p, cls = project
    res = _run(p, cls, "--benchmark-compare=0042")
    assert res.ret == 4
    err = res.stderr.str()
    assert f"perfsuite: --benchmark-compare=0042: no stored run of {cls} matches 0042*.json" in err, err
    assert "0001_" in err  # the runs there are listed
