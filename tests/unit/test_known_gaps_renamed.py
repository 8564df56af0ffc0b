"""A known-gaps file named after a machine's pre-tier class (known_gaps/cpu-intel-xeon-2c.toml) is still found, with
a note saying to rename it, and `perfsuite baselines migrate` renames it with the baselines."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from perfsuite import cli
from perfsuite.machine import capabilities, runner_class
from perfsuite.measure.ops import known_gaps as kg

ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = "cpu-intel-xeon-2c", "cpu-intel-xeon-amx-2c"
GAP = '[[gap]]\nop = "int8_dynamic_matmul"\nbackend = "onnxruntime-cpu"\nstatus = "*"\nreason = "this machine"\n'
ENV = kg.Environment({"onnxruntime": "1.32.0"}, "x86_64", frozenset({"avx2", "avx512f", "amx_tile"}))


def _dir(tmp_path: Path, **files: str) -> Path:
    d = tmp_path / "baselines" / "known_gaps"
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / f"{name}.toml").write_text(text)
    return d


def test_the_old_name_is_read_with_a_note_to_rename_it(tmp_path):
    d = _dir(tmp_path, **{OLD: GAP})
    found = kg.for_runner(NEW, d, ENV, legacy=OLD)
    assert [g.reason for g in found.gaps] == ["this machine"] and found.characterised
    assert found.files == (d / f"{OLD}.toml",)
    note = found.describe()
    assert "\n" not in note and f"{OLD}.toml is read as {NEW}.toml" in note and "perfsuite baselines migrate" in note


def test_the_new_name_wins_and_an_override_has_no_old_name(tmp_path):
    d = _dir(tmp_path, **{OLD: GAP, NEW: GAP.replace("this machine", "new")})
    found = kg.for_runner(NEW, d, ENV, legacy=OLD)
    assert [g.reason for g in found.gaps] == ["new"] and "rename" not in found.describe()
    assert runner_class.legacy_of("cpu-forced-avx2-2c") is None  # not the class detected here


def test_this_machines_old_name_is_found_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv(capabilities.ENV_FLAGS, raising=False)
    rc, facts = runner_class.detect("cpu")
    d = _dir(tmp_path, **{facts["legacy_runner_class"]: GAP})
    found = kg.for_runner(rc, d, ENV)
    assert [g.reason for g in found.gaps] == ["this machine"] and "rename it" in found.describe()


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_migrate_renames_the_gaps_file_with_the_folder(tmp_path, capsys):
    d = _dir(tmp_path, **{OLD: GAP})
    root = d.parent
    shutil.copytree(ROOT / "baselines" / f"{NEW}-before-20261206", root / OLD)  # the 3aae1d5 runs, recorded as cpu-intel-xeon-2c
    before = _sha(d / f"{OLD}.toml")
    assert cli.main(["baselines", "migrate", "--dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "10 run(s) and 1 known-gaps file(s) moved" in out
    assert sorted(p.name for p in d.iterdir()) == [f"{NEW}.toml"] and _sha(d / f"{NEW}.toml") == before


def test_migrate_renames_this_machines_gaps_file_and_refuses_a_clash(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(capabilities.ENV_FLAGS, raising=False)
    rc, facts = runner_class.detect("cpu")
    d = _dir(tmp_path, **{facts["legacy_runner_class"]: GAP, rc: GAP})
    assert cli.main(["baselines", "migrate", "--dir", str(d.parent)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "merge the two by hand (nothing was moved)" in err
    (d / f"{rc}.toml").unlink()
    assert cli.main(["baselines", "migrate", "--dir", str(d.parent)]) == 0
    assert sorted(p.name for p in d.iterdir()) == [f"{rc}.toml"]


def test_ops_write_known_gaps_takes_the_old_file_as_the_class_own(tmp_path, monkeypatch):
    """`perfsuite ops --write-known-gaps` writes every gap of the class file: the old-name file's are not taken as
    covered by another scope (they would be lost once the new file exists)."""
    from argparse import Namespace

    from perfsuite.adapters.cli import ops

    monkeypatch.delenv(capabilities.ENV_FLAGS, raising=False)
    monkeypatch.chdir(tmp_path)
    rc, facts = runner_class.detect("cpu")
    _dir(tmp_path, **{facts["legacy_runner_class"]: GAP, "all": GAP.replace("this machine", "everyone")})
    found, path, covered = ops._gaps(Namespace(known_gaps=None, device="cpu"), rc)
    assert path.name == f"{rc}.toml" and found.renamed
    assert [g.reason for g in covered] == ["everyone"]
