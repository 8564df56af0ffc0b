"""Hostile runner class overrides: a runner class names a folder, so a path or a reserved name is a usage error.

The pytester runs put this checkout first on PYTHONPATH, so the plugin under test is the one next to this file
(an editable install elsewhere would otherwise be imported in the subprocess).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """
[tool.perfsuite]
baselines_dir = "baselines"
[tool.perfsuite.scenarios]
tiny = { batch_size = 1, prompt_tokens = 8, new_tokens = 2 }
[tool.perfsuite.profiles.smoke]
backends = ["torch"]
models = ["tiny-llama"]
scenarios = ["tiny"]
warmup_generations = 0
generations = 1
"""


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("PERFSUITE_RUNNER_CLASS", raising=False)
    pytester.makefile(".toml", pyproject=PYPROJECT)
    (pytester.path / "tests" / "perf").mkdir(parents=True)
    (pytester.path / "tests" / "perf" / "test_latency.py").write_text((ROOT / "tests/perf/test_latency.py").read_text())
    (pytester.path / "outside").mkdir()
    return pytester


def _files(root: Path) -> set[str]:
    """Every file under ``root`` (and the parent of root, where ../ would land) but pytester's own output capture."""
    out = set()
    for base in (root, root.parent):
        for p in base.rglob("*"):
            rel = p.relative_to(base)
            if p.is_file() and "__pycache__" not in rel.parts and p.name not in ("stdout", "stderr"):
                out.add(str(p))
    return out


@pytest.mark.parametrize(("how", "value", "needle"), [
    ("env", "../../etc", "'../../etc': a path, not a name"),
    ("env", "../outside", "'../outside': a path, not a name"),
    ("option", "{abs}", "': a path, not a name"),  # an absolute path next to the project
    ("env", "known_gaps", "'known_gaps': a reserved name"),
    ("ini", "CPU-X", "did you mean 'cpu-x'?"),
])
def test_hostile_runner_class_with_update_baselines_is_a_usage_error(project, monkeypatch, how, value, needle):
    escape = project.path.parent / "abs-escape"
    value = value.format(abs=escape)
    args = ["tests/perf", "-p", "no:cacheprovider", "-q", "--perf-update-baselines"]
    if how == "env":
        monkeypatch.setenv("PERFSUITE_RUNNER_CLASS", value)
    elif how == "option":
        args += ["--perf-runner-class", value]
    else:
        project.makeini(f"[pytest]\nperfsuite_runner_class = {value}\n")
    before = _files(project.path)
    res = project.runpytest_subprocess(*args)
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + err
    assert needle in err and "PERFSUITE_RUNNER_CLASS" in err and "Traceback" not in err
    assert _files(project.path) == before  # nothing written, inside or outside baselines/
    assert not escape.exists()


# ---- a machine whose baselines sit under its pre-tier class name, and injected CPU flags -------------------------
def _legacy_store(project) -> tuple[str, str]:
    from perfsuite.machine.runner_class import detect

    rc, facts = detect("cpu")
    old = project.path / "baselines" / facts["legacy_runner_class"]
    old.mkdir(parents=True)
    run = next((ROOT / "baselines" / "cpu-intel-xeon-amx-2c-before-20261206").glob("0001_*.json"))
    (old / run.name).write_bytes(run.read_bytes())
    return rc, facts["legacy_runner_class"]


@pytest.mark.parametrize("mode", ["--benchmark-compare", "--perf-update-baselines"])
def test_only_an_old_style_folder_names_it_and_the_migration(project, mode):
    rc, legacy = _legacy_store(project)
    before = _files(project.path)
    res = project.runpytest_subprocess("tests/perf", "-p", "no:cacheprovider", "-q", mode)
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + err
    assert f"baselines/{legacy} holds this machine's baselines under its old runner class name" in err
    assert f"so this machine is {rc!r}" in err and "perfsuite baselines migrate" in err and "Traceback" not in err
    assert _files(project.path) == before  # nothing recorded beside the old folder


def test_injected_cpu_flags_never_record_a_baseline(project, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CPU_FLAGS", "sse2 avx avx2 fma")
    before = _files(project.path)
    res = project.runpytest_subprocess("tests/perf", "-p", "no:cacheprovider", "-q", "--perf-update-baselines")
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + err
    assert "not recording a baseline: PERFSUITE_CPU_FLAGS is set, a test hook that changes decisions" in err
    assert _files(project.path) == before
