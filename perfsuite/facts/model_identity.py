"""What a model is (a name says nothing about what is in the folder), so that the gate compares a run only with runs
of the same model. Recorded in ``extra_info["measured_by"]["model"]``:

* ``source``: ``preset`` or ``checkpoint`` (a directory or a hub snapshot).
* ``config``: a preset's digest (the suffix of its cache folder); a checkpoint's sha256 of ``config.json`` without
  the keys that only say who wrote it (``transformers_version`` and ``_`` keys).
* ``weights``: ``seeded`` for a preset; for a checkpoint, sha256 over the names and full contents of its
  ``*.safetensors`` (a same-shape re-train is another model, and values can decide speed: subnormals, MoE routing),
  cached in ``<cache>/fingerprints/`` by path, size, mtime, ctime and inode (a rewrite changes ctime).
* ``params`` and ``name`` are shown, not compared: a moved checkpoint is the same model.

Runs stored before identities were of a preset when their cell's ``model`` is a preset's name: they stay comparable
with it while their recorded ``model_params`` (when present) is the preset's count. Any other run without an
identity is incomparable with one that has it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.facts import cache_entry, identity_hash, models
from perfsuite.facts.model_shape import ModelShape


def of(name: str, cache_dir: Path | None = None) -> dict[str, Any]:
    """The identity of a model as the cell names it; ``{"name", "error"}`` (comparable with nothing) when its
    files cannot be read."""
    try:
        if name in models.PRESETS:
            return _preset(name)
        return checkpoint(name, models.resolve(name, cache_dir, materialize=False).path, cache_dir)
    except (OSError, ValueError, models.ModelError) as exc:
        return {"name": name, "error": f"{type(exc).__name__}: {exc}"}


def _preset(name: str) -> dict[str, Any]:
    p = models.PRESETS[name]
    return {"name": name, "source": "preset", "config": p.digest, "weights": "seeded",
            "params": ModelShape.from_config(p.config).total_params()}


def checkpoint(name: str, path: Path, cache_dir: Path | None = None) -> dict[str, Any]:
    files = sorted(Path(path).glob("*.safetensors"))
    w = hashlib.sha256()
    params = 0
    for f in files:
        w.update(f"{f.name}:{file_sha256(f, cache_dir)}\n".encode())
        params += safetensors_elements(f)
    config = json.loads((Path(path) / "config.json").read_text(encoding="utf8"))
    return {"name": name, "source": "checkpoint", "config": config_hash(config), "weights": w.hexdigest()[:12],
            "params": params}


def config_hash(config: Mapping[str, Any]) -> str:
    return identity_hash({k: v for k, v in config.items() if not k.startswith("_") and k != "transformers_version"})


def safetensors_elements(path: Path) -> int:
    """Elements of every tensor in a safetensors file, from its header (8-byte length + JSON) alone."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    return sum(math.prod(int(d) for d in t["shape"]) for key, t in header.items() if key != "__metadata__")


def file_sha256(path: Path, cache_dir: Path | None = None) -> str:
    """sha256 of a file's contents, cached by its stat (path, size, mtime, ctime, inode)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
           "ino": st.st_ino}
    entry = Path(cache_dir or models.default_cache_dir()) / "fingerprints" / \
        f"{hashlib.sha256(real.encode()).hexdigest()[:24]}.json"
    with contextlib.suppress(OSError, ValueError, AttributeError):
        cached = json.loads(entry.read_text())
        if {k: cached.get(k) for k in key} == key and isinstance(cached.get("sha256"), str):
            return str(cached["sha256"])
    digest = cache_entry.content_sha256(real)
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs a re-hash next time
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".fp.", dir=entry.parent)
        with os.fdopen(fd, "w") as out:
            json.dump({**key, "sha256": digest}, out)
        os.replace(tmp, entry)
    return digest


# ------------------------------------------------------------------------------------------------- the gate
def _key(ident: Mapping[str, Any]) -> tuple[Any, ...]:
    return ident.get("source"), ident.get("config"), ident.get("weights")


def _stored(bench: Mapping[str, Any]) -> Mapping[str, Any] | None:
    ident = ((bench.get("extra_info") or {}).get("measured_by") or {}).get("model")
    return ident if isinstance(ident, Mapping) else None


def describe(ident: Mapping[str, Any]) -> str:
    if ident.get("error"):
        return f"{ident.get('name')} (identity unknown: {ident['error']})"
    weights = "seeded weights" if ident.get("weights") == "seeded" else f"weights {ident.get('weights')}"
    params = f", {ident['params'] / 1e6:.1f} M params" if isinstance(ident.get("params"), int) else ""
    return f"{ident.get('name')} ({ident.get('source')}, config {ident.get('config')}, {weights}{params})"


def _describe_legacy(bench: Mapping[str, Any]) -> str:
    info = bench.get("extra_info") or {}
    p = info.get("model_params")
    params = f", {p / 1e6:.1f} M params" if isinstance(p, (int, float)) else ""
    return f"{(info.get('cell') or {}).get('model')} (recorded without a model identity{params})"


def _legacy_same(known: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    info = old.get("extra_info") or {}
    if known.get("source") != "preset" or (info.get("cell") or {}).get("model") != known.get("name"):
        return False
    p = info.get("model_params")
    return p is None or p == known.get("params")


def mismatch(current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """``["model <current> vs <baseline>"]`` when the two benchmark entries measured different models (or cannot
    be shown to be the same); empty when comparable. Entries without identities on both sides: as before."""
    a, b = _stored(current), _stored(baseline)
    if a is None and b is None:
        return []
    if a is not None and b is not None:
        same = _key(a) == _key(b) and not a.get("error")
    else:  # one side recorded without an identity
        same = _legacy_same(a, baseline) if a is not None else _legacy_same(b or {}, current)
    cur, base = (describe(x) if x is not None else _describe_legacy(bench)
                 for x, bench in ((a, current), (b, baseline)))
    return [] if same else [f"model {cur} vs {base}"]
