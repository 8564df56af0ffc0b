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
