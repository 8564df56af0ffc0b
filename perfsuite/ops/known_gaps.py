"""Known operator gaps per runner class: ``baselines/known_gaps/<runner-class>.toml``.

A known gap works like an xfail: a matrix cell whose worst status is not ``pass`` is *known* if an entry matches
it (op, backend, dtype, shape class; each a string, a list, or ``"*"``) and lists its status; otherwise it is
*new* and fails the run. An entry whose matching cells all passed (at least one example ran) is *fixed*: reported,
so that the entry can be deleted (``--strict-fixed`` makes that fail too)::

    [[gap]]
    op = "sdpa_kvcache"
    backend = "onnxruntime-cpu"
    dtype = "*"
    shape_class = ["tile_edge", "odd"]
    status = ["unsupported"]          # or "*": any non-pass status
    reason = "GroupQueryAttention CPU: batch_size must be 1 when sequence_length > 1 with past"
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

KEYS = ("op", "backend", "dtype", "shape_class")
DEFAULT_DIR = Path("baselines") / "known_gaps"


class KnownGapsError(ValueError):
    pass


@dataclass(frozen=True)
class Gap:
    op: tuple[str, ...]
    backend: tuple[str, ...]
    dtype: tuple[str, ...]
    shape_class: tuple[str, ...]
    status: tuple[str, ...]
    reason: str = ""
    index: int = 0

    def matches(self, op: str, backend: str, dtype: str, shape_class: str) -> bool:
        return all("*" in want or got in want for want, got in
                   zip((self.op, self.backend, self.dtype, self.shape_class), (op, backend, dtype, shape_class), strict=True))

    def accepts(self, status: str) -> bool:
        return "*" in self.status or status in self.status

    def label(self) -> str:
        return "/".join(",".join(v) for v in (self.op, self.backend, self.dtype, self.shape_class))


@dataclass
class GapReport:
    new: list[dict[str, Any]] = field(default_factory=list)  # cell keys + status + detail
    known: list[dict[str, Any]] = field(default_factory=list)
    fixed: list[dict[str, Any]] = field(default_factory=list)  # gap entries whose cells now pass

    def as_dict(self) -> dict[str, Any]:
        return {"new": self.new, "known": self.known, "fixed": self.fixed}


def _tuple(v: Any, key: str, where: str) -> tuple[str, ...]:
    if v is None:
        return ("*",)
    if isinstance(v, str):
        return (v,)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return tuple(v)
    raise KnownGapsError(f"{where}: {key} must be a string or a list of strings, got {v!r}")


def path_for(runner_class: str, directory: Path | None = None) -> Path:
    return (directory or DEFAULT_DIR) / f"{runner_class}.toml"


def load(path: Path) -> list[Gap]:
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise KnownGapsError(f"{path}: not valid TOML ({exc}); fix the file or delete it") from None
    gaps = []
    for i, entry in enumerate(data.get("gap", [])):
        where = f"{path} [[gap]] #{i + 1}"
        unknown = set(entry) - set(KEYS) - {"status", "reason", "issue"}
        if unknown:
            raise KnownGapsError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {', '.join(KEYS)}, status, "
                                 "reason, issue")
        if "op" not in entry or "backend" not in entry:
            raise KnownGapsError(f"{where}: needs at least op and backend")
        fields = {k: _tuple(entry.get(k), k, where) for k in KEYS}
        gaps.append(Gap(**fields, status=_tuple(entry.get("status", "*"), "status", where),  # type: ignore[arg-type]
                        reason=str(entry.get("reason", "")), index=i))
    return gaps


def find(gaps: Iterable[Gap], op: str, backend: str, dtype: str, shape_class: str, status: str) -> Gap | None:
    for g in gaps:
        if g.matches(op, backend, dtype, shape_class) and g.accepts(status):
            return g
    return None


def evaluate(cells: Iterable[dict[str, Any]], gaps: list[Gap]) -> GapReport:
    """``cells``: dicts with op, backend, dtype, shape_class, worst, n, detail, repro."""
    report = GapReport()
    exercised: dict[int, list[str]] = {}
    for c in cells:
        keys = (c["op"], c["backend"], c["dtype"], c["shape_class"])
        for g in gaps:
            if g.matches(*keys) and c.get("n", 0) > 0:
                exercised.setdefault(g.index, []).append(c["worst"])
        if c["worst"] == "pass":
            continue
        item: dict[str, Any] = {k: c[k] for k in ("op", "backend", "dtype", "shape_class", "worst", "detail", "repro") if k in c}
        hit = find(gaps, *keys, c["worst"])
        if hit is None:
            report.new.append(item)
        else:
            report.known.append({**item, "gap": hit.label(), "reason": hit.reason})
    for g in gaps:
        seen = exercised.get(g.index)
        if seen and all(s == "pass" for s in seen):
            report.fixed.append({"gap": g.label(), "status": list(g.status), "reason": g.reason,
                                 "cells_passed": len(seen)})
    return report


def _toml_value(v: tuple[str, ...] | str) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return _toml_value(v[0]) if len(v) == 1 else "[" + ", ".join(_toml_value(x) for x in v) + "]"


def render(runner_class: str, cells: Iterable[dict[str, Any]]) -> str:
    """A known-gaps file listing every non-pass cell exactly (the ``--write-known-gaps`` output)."""
    lines = [f"# Known operator gaps for runner class {runner_class}.",
             "# Written by `perfsuite ops --write-known-gaps`; edit reasons, widen with lists or \"*\".", ""]
    for c in sorted(cells, key=lambda c: (c["op"], c["backend"], c["dtype"], c["shape_class"])):
        if c["worst"] == "pass":
            continue
        lines += ["[[gap]]"] + [f"{k} = {_toml_value(c[k])}" for k in KEYS]
        lines += [f"status = {_toml_value((c['worst'],))}", f"reason = {_toml_value(c.get('detail', '')[:300])}", ""]
    return "\n".join(lines)
