"""The one on-disk format of perfsuite's derived caches (a materialised preset, an AWQ checkpoint and its twin, an
ONNX export and its int8 variant): a folder built in a temporary sibling (:func:`new_tmp`) and renamed into place by
:func:`commit`, which writes the marker last: whatever the builder records plus ``files``, each file's size and
SHA-256 (above :data:`SHA_LIMIT` by size only). An interrupted build has no marker, and :func:`files_problem` finds a
short or altered file: such an entry is rebuilt, never loaded. Markers written before 2026-12-02 by the model cache
list bare sizes; they still read."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

SHA_LIMIT = 256 << 20  # files above this are checked by size only (hashing 14 GB on every load is too slow)


def content_sha256(path: Path | str) -> str:
    h = hashlib.sha256()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def file_record(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    return {"size": size, "sha256": content_sha256(path) if size <= SHA_LIMIT else None}


def read_marker(entry: Path, marker: str) -> dict[str, Any] | str:
    """The marker's object, or why there is none usable (a str)."""
    try:
        meta = json.loads((entry / marker).read_text())
    except FileNotFoundError:
        return "no marker (partial entry)"
    except (OSError, ValueError) as exc:
        return f"unreadable marker: {exc}"
    return meta if isinstance(meta, dict) else "marker is not a JSON object"


def files_problem(entry: Path, files: object, hashes: bool = True) -> str | None:
    """Why the files a marker lists are not all there as recorded (missing, other size, other SHA-256), or None.
    ``hashes=False`` checks sizes only (what a load on every worker start can afford)."""
    if not isinstance(files, Mapping) or not files:
        return "marker lists no files"
    for name, rec in files.items():
        rec = rec if isinstance(rec, Mapping) else {"size": rec}
        f = entry / name
        if not f.is_file():
            return f"{name} missing"
        if f.stat().st_size != rec.get("size"):
            return f"{name} size {f.stat().st_size} != recorded {rec.get('size')}"
        if hashes and rec.get("sha256") and file_record(f)["sha256"] != rec["sha256"]:
            return f"{name} sha256 mismatch"
    return None


def new_tmp(target: Path) -> Path:
    """A fresh temporary sibling of ``target`` to build an entry in (same file system, so the rename is atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))


@contextlib.contextmanager
def building(target: Path) -> Iterator[Path]:
    """:func:`new_tmp` for the ``with`` block that builds the entry; removed if the block fails (Ctrl-C included)."""
    tmp = new_tmp(target)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def commit(tmp: Path, target: Path, meta: Mapping[str, Any], marker: str,
           sound: Callable[[Path], bool] | None = None) -> dict[str, Any]:
    """Record ``tmp``'s files in its marker (written last), replace ``target`` by it and return the marker's object.
    A broken earlier ``target`` is removed first. When another process renamed a complete entry into place in the
    meantime (``sound(target)``, by default: its files are as its marker lists), theirs is kept and ``tmp`` goes."""
    record = {**meta, "files": {f.name: file_record(f) for f in sorted(tmp.iterdir())
                                if f.is_file() and f.name != marker}}
    (tmp / marker).write_text(json.dumps(record, indent=1, sort_keys=True))
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        theirs = read_marker(target, marker)
        ok = sound(target) if sound else isinstance(theirs, dict) and files_problem(target, theirs.get("files")) is None
        if not ok or not isinstance(theirs, dict):
            raise
        return theirs
    return record
