"""Runs recorded before runner classes carried the CPU tier: read under today's name, moved byte for byte."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from perfsuite import cli
from perfsuite.orchestrate import baselines

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "baselines" / "cpu-intel-xeon-amx-2c-before-20261206"  # 10 runs recorded as cpu-intel-xeon-2c


def sha(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.json"))}


def test_committed_runs_read_under_the_new_name_and_the_old():
    runs = baselines.read_runs(COMMITTED, "cpu-intel-xeon-amx-2c")
    assert len(runs) == 10
    meta = runs[0]["machine_info"]["perfsuite"]
    assert meta["runner_class"] == "cpu-intel-xeon-amx-2c" and meta["runner_class_recorded"] == "cpu-intel-xeon-2c"
    assert len(baselines.read_runs(COMMITTED, "cpu-intel-xeon-2c")) == 10  # an override of the old name still works
    with pytest.raises(baselines.BaselineError, match="recorded on runner class 'cpu-intel-xeon-amx-2c'"):
        baselines.read_runs(COMMITTED, "cpu-amd-epyc-avx2-2c")


@pytest.fixture
def old_store(tmp_path):
    """A baselines folder as an older perfsuite left it: the committed runs under their recorded class name."""
    root = tmp_path / "baselines"
    shutil.copytree(COMMITTED, root / "cpu-intel-xeon-2c")
    return root


def _cli(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_migrate_renames_the_folder_files_unchanged(old_store, capsys):
    before = sha(old_store / "cpu-intel-xeon-2c")
    code, out, _ = _cli(["baselines", "migrate", "--dir", str(old_store), "--dry-run"], capsys)
    assert code == 0 and "would move" in out and (old_store / "cpu-intel-xeon-2c").exists()
    code, out, _ = _cli(["baselines", "migrate", "--dir", str(old_store)], capsys)
    assert code == 0 and "10 run(s) moved, files unchanged" in out
    assert sorted(p.name for p in old_store.iterdir()) == ["cpu-intel-xeon-amx-2c"]
    assert sha(old_store / "cpu-intel-xeon-amx-2c") == before
    code, out, _ = _cli(["baselines", "migrate", "--dir", str(old_store)], capsys)
    assert code == 0 and "nothing to migrate" in out


def _retier(path: Path, flags: list[str]) -> None:
    """A copy of a run as an AVX2 machine of the same old class would have recorded it."""
    data = json.loads(path.read_text())
    data["machine_info"]["cpu"]["flags"] = flags
    data["machine_info"]["perfsuite"]["doctor"]["cpu"]["flags"] = [f for f in flags if f in ("avx2", "fma")]
    path.write_text(json.dumps(data))


def test_one_old_folder_of_two_tiers_parts_by_recorded_flags(old_store, capsys):
    old = old_store / "cpu-intel-xeon-2c"
    avx2 = sorted(old.glob("*.json"))[-2:]
    for p in avx2:
        _retier(p, ["sse2", "avx", "avx2", "fma"])
    before = sha(old)
    code, out, _ = _cli(["baselines", "migrate", "--dir", str(old_store)], capsys)
    assert code == 0, out
    moved = {**sha(old_store / "cpu-intel-xeon-amx-2c"), **sha(old_store / "cpu-intel-xeon-avx2-2c")}
    assert moved == before and not old.exists()
    assert sorted(sha(old_store / "cpu-intel-xeon-avx2-2c")) == [p.name for p in avx2]


def test_a_clash_moves_nothing(old_store, capsys):
    first = sorted((old_store / "cpu-intel-xeon-2c").glob("*.json"))[0]
    (old_store / "cpu-intel-xeon-amx-2c").mkdir()
    taken = old_store / "cpu-intel-xeon-amx-2c" / ("0001_smoke_other.json")
    shutil.copy(first, taken)
    before = sha(old_store / "cpu-intel-xeon-2c")
    code, _, err = _cli(["baselines", "migrate", "--dir", str(old_store)], capsys)
    assert code == 2 and err.count("\n") == 1 and "already has run 0001" in err and "nothing was moved" in err
    assert sha(old_store / "cpu-intel-xeon-2c") == before and len(sha(old_store / "cpu-intel-xeon-amx-2c")) == 1


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_in_a_git_work_tree_the_move_is_a_git_mv(old_store, capsys):
    git = ["git", "-C", str(old_store.parent), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "baselines"], check=True)
    subprocess.run([*git, "commit", "-qm", "old"], check=True)
    code, out, _ = _cli(["baselines", "migrate", "--dir", str(old_store)], capsys)
    assert code == 0 and "(git mv)" in out
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, check=True).stdout
    assert status.count("R  baselines/cpu-intel-xeon-2c/") == 10 and "cpu-intel-xeon-amx-2c/" in status


def test_legacy_folder_of_this_machine_is_found_only_when_it_needs_migrating(old_store):
    facts = {"legacy_runner_class": "cpu-intel-xeon-2c", "detected_runner_class": "cpu-intel-xeon-amx-2c"}
    old = baselines.legacy_folder(old_store, "cpu-intel-xeon-amx-2c", facts)
    assert old == old_store / "cpu-intel-xeon-2c"
    msg = baselines.legacy_message(old, "cpu-intel-xeon-amx-2c")
    assert "perfsuite baselines migrate" in msg and "git mv" in msg and "cpu-intel-xeon-amx-2c" in msg
    assert baselines.legacy_folder(old_store, "cpu-forced-2c", {**facts, "detected_runner_class": "x"}) is None
    shutil.move(old, old_store / "cpu-intel-xeon-amx-2c")
    assert baselines.legacy_folder(old_store, "cpu-intel-xeon-amx-2c", facts) is None
