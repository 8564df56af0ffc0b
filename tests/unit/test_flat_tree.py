"""A tree from before the layer packages is still measured: `perfsuite ab`, the in-session confirmation and bisect
drive the baselines' commit, often older than the move, through the module paths its own tree spells
(perfsuite.measure.worker.pool.FLAT_NAMES). The tree here is the last commit before the move, exported from this
repository's history; the A/B runs both sides' own code through one shared zygote of this tree."""

from __future__ import annotations

import json
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest
from test_ab_cli import PYPROJECT, make_tree  # tests/unit is on sys.path (rootdir conftest, prepend import mode)

from perfsuite.cli import main as cli
from perfsuite.measure.worker import pool

ROOT = Path(__file__).resolve().parents[2]
PRE_MOVE = "6852123"  # "history show: the median column is the median", the last commit with the flat layout


def export(rev: str, dest: Path) -> Path:
    """``rev``'s perfsuite package (as committed) under ``dest``, with a one-cell tiny profile; skip without history."""
    try:
        blob = subprocess.run(["git", "archive", rev, "perfsuite"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"commit {rev} is not in this clone's history (a shallow clone?); clone with full history")
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(dest, filter="data")
    (dest / "pyproject.toml").write_text(PYPROJECT.format(scenario="tiny", generations=1))
    return dest


def test_a_pre_move_tree_is_named_by_its_own_module_paths(tmp_path: Path) -> None:
    old = pool.Side(export(PRE_MOVE, tmp_path / "old"), label="A")
    assert pool.flat_tree(old.tree) and not pool.flat_tree(ROOT)
    assert old.module("perfsuite.measure.worker") == "perfsuite.worker"
    assert old.has("perfsuite.measure.serving.replicate") and old.has("perfsuite.measure.worker.child")


@pytest.mark.slow
def test_ab_measures_a_pre_move_tree_against_this_one(tmp_path: Path) -> None:
    old = export(PRE_MOVE, tmp_path / "old")
    # the probe that ab runs first (an interpreter importing torch: the slow tier), by the old tree's module paths
    facts = pool.probe(pool.Side(old, label="A"), ("perfsuite.measure.worker.child", *pool.preload_modules({"torch"})))
    assert Path(facts["perfsuite_file"]).is_relative_to(old) and not facts["import_errors"]
    new = make_tree(tmp_path / "new")
    out = tmp_path / "ab.json"
    rc = cli(["ab", "--a", str(old), "--b", str(new), "--max-pairs", "3", "--budget", "3m", "--json", str(out)])
    data = json.loads(out.read_text())
    assert rc in (0, 1), data.get("stopped")
    assert data["zygote"] == "shared" and len(data["pairs"]) == 3
    for pair in data["pairs"]:  # each side's workers imported perfsuite from that side's tree
        assert Path(pair["perfsuite_file"]["A"]).is_relative_to(old)
        assert Path(pair["perfsuite_file"]["B"]).is_relative_to(new)
