"""The one on-disk format of the derived caches (perfsuite/facts/cache_entry.py): models, AWQ, ONNX exports, calibration."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfsuite.facts import cache_entry, models

MARKER = "marker.json"


def _build(root: Path, name: str = "entry", payload: bytes = b"weights" * 100) -> tuple[Path, Path]:
    target = root / name
    tmp = cache_entry.new_tmp(target)
    (tmp / "model.safetensors").write_bytes(payload)
    (tmp / "config.json").write_text("{}")
    return tmp, target


def test_commit_records_sizes_and_hashes_and_the_marker_last(tmp_path: Path) -> None:
    tmp, target = _build(tmp_path)
    record = cache_entry.commit(tmp, target, {"digest": "abc"}, MARKER)
    assert not tmp.exists() and target.is_dir()
    on_disk = json.loads((target / MARKER).read_text())
    assert on_disk == record and on_disk["digest"] == "abc"
    assert set(on_disk["files"]) == {"model.safetensors", "config.json"}
    assert on_disk["files"]["model.safetensors"]["size"] == 700 and len(on_disk["files"]["config.json"]["sha256"]) == 64
    assert cache_entry.files_problem(target, on_disk["files"]) is None


def test_a_short_or_altered_file_is_found(tmp_path: Path) -> None:
    tmp, target = _build(tmp_path)
    files = cache_entry.commit(tmp, target, {}, MARKER)["files"]
    f = target / "model.safetensors"
    f.write_bytes(b"X" + f.read_bytes()[1:])  # same size, other bytes
    assert cache_entry.files_problem(target, files) == "model.safetensors sha256 mismatch"
    assert cache_entry.files_problem(target, files, hashes=False) is None  # the per-worker size check
    f.write_bytes(b"short")
    assert "size 5 != recorded 700" in str(cache_entry.files_problem(target, files, hashes=False))
    f.unlink()
    assert cache_entry.files_problem(target, files) == "model.safetensors missing"
    assert cache_entry.read_marker(tmp_path / "nothing", MARKER) == "no marker (partial entry)"


def test_the_model_cache_reads_its_entries_and_its_older_markers(tmp_path: Path) -> None:
    tmp, target = _build(tmp_path)
    cache_entry.commit(tmp, target, {"digest": "d1"}, models.MARKER)
    assert models.is_complete(target, "d1") and not models.is_complete(target, "d2")
    # a marker of the model cache before 2026-12-02: bare sizes
    (target / models.MARKER).write_text(json.dumps({"digest": "d1", "files": {"model.safetensors": 700}}))
    assert models.is_complete(target, "d1")
    (target / "model.safetensors").write_bytes(b"short")
    assert not models.is_complete(target, "d1")


def test_a_race_keeps_the_other_process_entry_only_when_it_is_sound(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    tmp, target = _build(tmp_path)
    theirs_tmp, _ = _build(tmp_path, payload=b"theirs")
    real_replace = os.replace

    def lose_the_race(src: str, dst: str) -> None:  # the other process renames its entry in first
        real_replace(theirs_tmp, dst)
        raise OSError(39, "Directory not empty")

    (theirs_tmp / MARKER).write_text(json.dumps({"digest": "theirs", "files": {
        "model.safetensors": cache_entry.file_record(theirs_tmp / "model.safetensors")}}))
    monkeypatch.setattr(cache_entry.os, "replace", lose_the_race)
    kept = cache_entry.commit(tmp, target, {"digest": "ours"}, MARKER)
    assert kept["digest"] == "theirs" and not tmp.exists() and (target / "model.safetensors").read_bytes() == b"theirs"

    monkeypatch.setattr(cache_entry.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(30, "Read-only")))
    tmp2, _ = _build(tmp_path, "entry")  # a rename that fails with no sound entry in place: the error is raised
    with pytest.raises(OSError, match="Read-only"):
        cache_entry.commit(tmp2, tmp_path / "entry", {}, MARKER)
    assert not tmp2.exists()
