"""``perfsuite ab``: bad input is one line and exit 2, before any pair runs, and nothing lands in baselines/."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from perfsuite.adapters.cli._common import parse_duration
from perfsuite.cli import main as cli
from perfsuite.facts.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """
[tool.perfsuite]
[tool.perfsuite.scenarios]
tiny = {{ batch_size = 1, prompt_tokens = 8, new_tokens = 4 }}
[tool.perfsuite.profiles.smoke]
backends = ["torch"]
models = ["tiny-llama"]
scenarios = ["{scenario}"]
warmup_generations = 0
generations = {generations}
"""


def make_tree(path: Path, *, scenario: str = "tiny", generations: int = 1) -> Path:
    """A minimal perfsuite checkout: the package and a pyproject with [tool.perfsuite]."""
    shutil.copytree(ROOT / "perfsuite", path / "perfsuite", ignore=shutil.ignore_patterns("__pycache__"))
    (path / "pyproject.toml").write_text(PYPROJECT.format(scenario=scenario, generations=generations))
    return path


def one_line_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfsuite ab: ") and "\n" not in err, err
    return err


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("trees")
    return make_tree(base / "a"), make_tree(base / "b")


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("2m", 120), ("1h30m", 5400), ("1.5m", 90), ("45", 45)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "2 weeks", "-5s", "0", "5x"])
def test_bad_duration(text: str) -> None:
    with pytest.raises(UsageError, match=r"duration|longer than 0"):
        parse_duration(text)


def test_budget_that_is_not_a_duration(trees: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    a, b = trees
    assert cli(["ab", "--a", str(a), "--b", str(b), "--budget", "soon"]) == 2
    assert "--budget 'soon' is not a duration" in one_line_error(capsys)


def test_tree_that_is_not_a_checkout(trees: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli(["ab", "--a", str(tmp_path), "--b", str(trees[1])]) == 2
    assert "not a perfsuite checkout" in one_line_error(capsys)
    assert cli(["ab", "--a", str(tmp_path / "nope"), "--b", str(trees[1])]) == 2
    assert "no such directory" in one_line_error(capsys)
    assert cli(["ab", "--b", str(trees[1])]) == 2
    assert "--a TREE is required" in one_line_error(capsys)


def test_interpreter_that_does_not_exist(trees: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    a, b = trees
    assert cli(["ab", "--a", str(a), "--b", str(b), "--a-python", "/nonexistent/python"]) == 2
    assert "interpreter /nonexistent/python does not exist" in one_line_error(capsys)


def test_interpreter_that_cannot_import_the_workers_needs(trees: tuple[Path, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """A bare venv (no numpy, no torch): refused before any pair runs, naming what it lacks."""
    import venv

    venv.create(tmp_path / "bare", with_pip=False)
    py = tmp_path / "bare" / "bin" / "python"
    a, b = trees
    assert cli(["ab", "--a", str(a), "--b", str(b), "--a-python", str(py)]) == 2
    err = one_line_error(capsys)
    assert "side A" in err and "cannot" in err and str(py) in err


def test_interpreter_that_imports_another_tree(trees: tuple[Path, Path], capsys: pytest.CaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter set up to find another perfsuite first (here: safe-path mode, so the working directory is
    not on sys.path, and a PYTHONPATH naming another checkout): comparing would compare the wrong code."""
    from perfsuite.measure.worker import pool

    real = pool.Side.environ

    def shadowed(self: pool.Side) -> dict[str, str]:
        env = real(self)
        env["PYTHONPATH"] = str(ROOT)  # put another perfsuite first
        env["PYTHONSAFEPATH"] = "1"
        return env

    monkeypatch.setattr(pool.Side, "environ", shadowed)
    a, b = trees
    assert cli(["ab", "--a", str(a), "--b", str(b)]) == 2
    assert f"imports perfsuite from {ROOT / 'perfsuite'}, not from {a}" in one_line_error(capsys)


@pytest.mark.slow  # four probes of each side that import torch (~20 s on 2 cores)
def test_sides_whose_cells_differ(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = make_tree(tmp_path / "a")
    b = make_tree(tmp_path / "b", scenario="short")
    assert cli(["ab", "--a", str(a), "--b", str(b)]) == 2
    assert "the sides select different cells" in one_line_error(capsys)
    c = make_tree(tmp_path / "c", generations=3)
    assert cli(["ab", "--a", str(a), "--b", str(c)]) == 2
    assert "generations 1 (A) vs 3 (B)" in one_line_error(capsys)


@pytest.mark.parametrize("item", ["=value", "NOVALUE", "1BAD=x"])
def test_bad_env(trees: tuple[Path, Path], capsys: pytest.CaptureFixture, item: str) -> None:
    a, b = trees
    assert cli(["ab", "--a", str(a), "--b", str(b), "--b-env", item]) == 2
    assert "--b-env" in one_line_error(capsys)


def test_a_thread_count_the_runtimes_would_ignore(trees: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    a, b = trees
    assert cli(["ab", "--a", str(a), "--b", str(b), "--b-env", "OMP_NUM_THREADS=abc"]) == 2
    assert "side B: OMP_NUM_THREADS='abc': not a thread count" in one_line_error(capsys)


@pytest.mark.parametrize("module", ["perfsuite/measure/backends/torch_backend.py", "perfsuite/measure/worker/job.py",
                                    "perfsuite/facts/config.py"])
def test_a_syntax_error_in_a_tree_names_file_line_and_fix(trees: tuple[Path, Path], tmp_path: Path, module: str,
                                                           capsys: pytest.CaptureFixture) -> None:
    """The broken tree is side A, which ab probes first: the error comes from the same probe/plan path whichever side
    it is (``side {label}``), without probing a whole healthy side before it (~3 s of torch imports each)."""
    _, b = trees
    a = make_tree(tmp_path / "a")
    src = (a / module).read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(src) if i >= 15 and line.startswith(("def ", "class ", "@")))  # top level
    src.insert(at, "def broken(:\n")
    (a / module).write_text("".join(src))
    assert cli(["ab", "--a", str(a), "--b", str(b)]) == 2
    err = one_line_error(capsys)
    assert f"side A: {a / module}, line {at + 1}: SyntaxError" in err and "fix the syntax error in that tree" in err, err
    assert "install" not in err


def test_no_cell_selected(trees: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    a, b = trees
    assert cli(["ab", "--a", str(a), "--b", str(b), "--cells", "vllm-*"]) == 2
    assert "no cell selected" in one_line_error(capsys)


def test_python_is_this_interpreter_by_default() -> None:
    assert Path(sys.executable).exists()


def test_ab_takes_the_suite_lock_of_an_ordinary_run(trees: tuple[Path, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    """Two perfsuite runs at once slow each other (issue 40): ab waits for another run that measures, as a pytest
    run does; with PERFSUITE_LOCK_WAIT_S=0 it is refused at once, in one line, before any worker starts."""
    from perfsuite.machine.preflight import SuiteLock

    a, b = trees
    monkeypatch.setenv("PERFSUITE_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.setenv("PERFSUITE_LOCK_WAIT_S", "0")
    with SuiteLock(exclusive=False, measuring=True, directory=tmp_path / "lock"):
        assert cli(["ab", "--a", str(a), "--b", str(b), "--budget", "1m"]) == 2
    assert "another perfsuite run is measuring on this machine" in one_line_error(capsys)
    with SuiteLock(exclusive=True, directory=tmp_path / "lock"):  # and ab let go of it
        pass
