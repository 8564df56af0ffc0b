"""Known operator gaps, keyed by what determines them: ``baselines/known_gaps/*.toml`` (docs/ops.md, "Known gaps").

A runner class's gaps are the entries of ``all.toml``, ``<family>.toml`` and ``<runner-class>.toml`` whose ``when``
holds here. Like an xfail: a non-pass cell an entry matches is *known*, otherwise *new* (*not yet characterised* on a
feature set no file's ``characterised_on`` covers); an entry whose exercised cells all pass is *fixed*.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Environment, environment and conditions_hold are also part of the known-gaps API (callers use them from here).
from perfsuite.facts.config import tomllib
from perfsuite.facts.schema import first_unknown
from perfsuite.measure.ops.gap_conditions import LIBRARIES, WHEN_KEYS, Environment, conditions_hold, environment

KEYS = ("op", "backend", "dtype", "shape_class")
DEFAULT_DIR = Path("baselines") / "known_gaps"  # relative to the project root; see directory_for()
ALL_RUNNERS = "all"  # all.toml: gaps of every runner class


class KnownGapsError(ValueError):
    """A known-gaps file that cannot be used; the message names the file, the entry and the fix."""


def _check_when(when: Any, where: str) -> dict[str, tuple[str, ...]]:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    if when is None:
        return {}
    if not isinstance(when, Mapping):
        raise KnownGapsError(f"{where}: when must be a table, e.g. when = {{ onnxruntime = \">=1.20\" }}")
    out = {}
    for key, value in when.items():
        if key not in WHEN_KEYS:
            raise KnownGapsError(f"{where}: when.{key}: unknown condition; allowed: {', '.join(WHEN_KEYS)}")
        vals = _tuple(value, f"when.{key}", where)
        if key in LIBRARIES:
            for v in vals:
                try:
                    SpecifierSet(v)
                except InvalidSpecifier:
                    raise KnownGapsError(f"{where}: when.{key} = {v!r}: not a version specifier; write e.g. "
                                         "\">=1.20\" or \">=1.20,<1.23\"") from None
        out[key] = vals
    return out


@dataclass(frozen=True)
class Gap:
    op: tuple[str, ...]
    backend: tuple[str, ...]
    dtype: tuple[str, ...]
    shape_class: tuple[str, ...]
    status: tuple[str, ...]
    reason: str = ""
    index: int = 0
    when: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = ""  # the file it came from

    def matches(self, op: str, backend: str, dtype: str, shape_class: str) -> bool:
        return all("*" in want or got in want for want, got in
                   zip((self.op, self.backend, self.dtype, self.shape_class), (op, backend, dtype, shape_class), strict=True))

    def label(self) -> str:
        return "/".join(",".join(v) for v in (self.op, self.backend, self.dtype, self.shape_class))


@dataclass(frozen=True)
class GapSet:
    """The gaps that apply to one runner class here, and whether that class has been characterised at all."""

    runner_class: str
    gaps: tuple[Gap, ...]
    files: tuple[Path, ...]  # the scope files that exist (read), in order all, family, class
    characterised: bool
    env: Environment | None = None
    characterised_by: tuple[str, ...] = ()  # the files that characterise this feature set
    declared: tuple[str, ...] = ()  # the files that declare characterised_on
    renamed: str = ""  # a note: the class file was found under this machine's pre-tier class name

    @property
    def features(self) -> str:
        return self.env.features() if self.env else "this machine"

    def describe(self) -> str:
        names = ", ".join(p.name for p in self.files) or "none"
        if self.characterised:
            state = f"characterised on {self.features}" + (f" by {', '.join(self.characterised_by)}"
                                                           if self.characterised_by else "")
        elif self.declared:
            state = (f"not yet characterised on {self.features}: {', '.join(self.declared)} characterise(s) other "
                     "feature sets (characterised_on)")
        else:
            state = f"not yet characterised on {self.features}: no known-gaps file declares it (characterised_on)"
        return f"runner class {self.runner_class} ({state}); known-gaps files: {names}" + (
            f"; {self.renamed}" if self.renamed else "")


def directory_for(start: Path | None = None) -> Path:
    """``<baselines_dir>/known_gaps`` of the project around ``start`` (default: the working directory), from its
    ``[tool.perfsuite] baselines_dir``; ``baselines/known_gaps`` under ``start`` if there is no project."""
    from perfsuite.facts import config as cfg

    start = (start or Path.cwd()).resolve()
    pyproject = cfg.find_pyproject(start)
    if pyproject is None:
        return start / DEFAULT_DIR
    try:
        return cfg.load(pyproject, start).baselines_dir / DEFAULT_DIR.name
    except cfg.ConfigError as exc:
        raise KnownGapsError(str(exc)) from None


def scope_files(runner_class: str, directory: Path | None = None) -> tuple[Path, Path, Path]:
    """(all.toml, <family>.toml, <runner-class>.toml) in ``directory``; the last two are one file for a class that
    is only a family name."""
    from perfsuite.facts.runner_name import family, validate

    d = directory or DEFAULT_DIR
    rc = validate(runner_class)
    return d / f"{ALL_RUNNERS}.toml", d / f"{family(rc)}.toml", d / f"{rc}.toml"


def for_runner(runner_class: str, directory: Path | None = None, env: Environment | None = None,
               legacy: str | None = None) -> GapSet:
    """The gaps of ``runner_class``: all.toml + its family's file + its own, entries whose ``when`` holds in ``env``
    (default: this machine). Without a file of its own, its file under its pre-tier name (``legacy``; default: this
    machine's, if ``runner_class`` is the class detected here) is read, with a note saying to rename it. Raises
    :class:`KnownGapsError` for a malformed file or an invalid class."""
    from perfsuite.machine.runner_class import legacy_of

    try:
        every, fam, own = scope_files(runner_class, directory)
        name = legacy if legacy is not None else legacy_of(runner_class)
    except ValueError as exc:
        raise KnownGapsError(str(exc)) from None
    path = own.with_name(f"{name}.toml")
    old = path if name and name != runner_class and not own.exists() and path.exists() else None
    note = ""
    if old is not None and own != fam:
        note = (f"{old} is read as {own.name}: it is named after this machine's runner class before classes carried "
                f"the CPU tier; rename it with `perfsuite baselines migrate` (or `git mv {old} {own}`)")
        own = old
    present = tuple(dict.fromkeys(p for p in (every, fam, own) if p.exists()))
    return read(runner_class, present, own if own != fam else None, env or environment(), note)


def read(runner_class: str, paths: tuple[Path, ...], own: Path | None, env: Environment, renamed: str = "") -> GapSet:
    """The gaps of ``paths`` (a missing file reads as empty) whose ``when`` holds in ``env``; ``own`` is the file
    that characterises its own class when it has no characterised_on."""
    gaps: list[Gap] = []
    by, declared = [], []
    for path in paths:
        entries, on = load_file(path, start=len(gaps))
        gaps += [g for g in entries if conditions_hold(g.when, env)]
        if on is not None:
            declared.append(path.name)
        if (on is None and path == own) or any(conditions_hold(c, env) for c in on or ()):
            by.append(path.name)
    return GapSet(runner_class, tuple(gaps), tuple(p for p in paths if p.exists()), bool(by), env, tuple(by),
                  tuple(declared), renamed)


@dataclass
class GapReport:
    new: list[dict[str, Any]] = field(default_factory=list)  # cell keys + status + detail
    known: list[dict[str, Any]] = field(default_factory=list)
    fixed: list[dict[str, Any]] = field(default_factory=list)  # gap entries whose cells now pass
    # non-pass cells on a feature set that no known-gaps file characterises yet: reported, failed only by --strict
    uncharacterised: list[dict[str, Any]] = field(default_factory=list)


def _tuple(v: Any, key: str, where: str) -> tuple[str, ...]:
    if v is None:
        return ("*",)
    if isinstance(v, str):
        return (v,)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return tuple(v)
    raise KnownGapsError(f"{where}: {key} must be a string or a list of strings, got {v!r}")


def path_for(runner_class: str, directory: Path | None = None) -> Path:
    """The file of one runner class (the one ``--write-known-gaps`` writes)."""
    return scope_files(runner_class, directory)[2]


def load(path: Path, start: int = 0) -> list[Gap]:
    """Every entry of one file (``when`` not yet applied); ``start`` offsets the entry indexes across files."""
    return load_file(path, start)[0]


def _characterised_on(value: Any, path: Path) -> tuple[Mapping[str, tuple[str, ...]], ...]:
    where = f"{path} characterised_on"
    tables = value if isinstance(value, list) else [value]
    if not all(isinstance(t, Mapping) for t in tables):
        raise KnownGapsError(f"{where}: must be a table or a list of tables, e.g. characterised_on = "
                             "{ cpu_tier = [\"avx2\", \"amx\"] }")
    return tuple(_check_when(t, where) for t in tables)


def load_file(path: Path, start: int = 0) -> tuple[list[Gap], tuple[Mapping[str, tuple[str, ...]], ...] | None]:
    """(every entry, ``when`` not yet applied; the file's ``characterised_on`` conditions, None if it has none)."""
    if not path.exists():
        return [], None
    try:
        data = tomllib.loads(path.read_text(encoding="utf8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KnownGapsError(f"{path}: not valid TOML ({exc}); fix the file or delete it") from None
    except OSError as exc:
        raise KnownGapsError(f"{path}: cannot be read ({exc.strerror}); fix its permissions") from None
    unknown_top = first_unknown(data, ("gap", "characterised_on"))
    if unknown_top:
        raise KnownGapsError(f"{path}: unknown table or key {unknown_top!r}; a known-gaps file holds only "
                             "[[gap]] entries and characterised_on")
    on = _characterised_on(data["characterised_on"], path) if "characterised_on" in data else None
    entries = data.get("gap", [])
    if not isinstance(entries, list):
        raise KnownGapsError(f"{path}: 'gap' must be an array of tables: write each entry under [[gap]]")
    gaps = []
    for i, entry in enumerate(entries):
        where = f"{path} [[gap]] #{i + 1}"
        if not isinstance(entry, dict):
            raise KnownGapsError(f"{where}: not a table; write each entry under [[gap]]")
        unknown = set(entry) - set(KEYS) - {"status", "reason", "issue", "when"}
        if unknown:
            raise KnownGapsError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {', '.join(KEYS)}, status, "
                                 "when, reason, issue")
        if "op" not in entry or "backend" not in entry:
            raise KnownGapsError(f"{where}: needs at least op and backend")
        fields = {k: _tuple(entry.get(k), k, where) for k in KEYS}
        gaps.append(Gap(**fields, status=_tuple(entry.get("status", "*"), "status", where),  # type: ignore[arg-type]
                        reason=str(entry.get("reason", "")), index=start + i,
                        when=_check_when(entry.get("when"), where), source=str(path)))
    return gaps, on


def find(gaps: Iterable[Gap], op: str, backend: str, dtype: str, shape_class: str, status: str) -> Gap | None:
    return next((g for g in gaps if g.matches(op, backend, dtype, shape_class) and ("*" in g.status or status in g.status)),
                None)


def evaluate(cells: Iterable[dict[str, Any]], gaps: Iterable[Gap], characterised: bool = True) -> GapReport:
    """``cells``: dicts with op, backend, dtype, shape_class, worst, n, detail, repro. An unmatched non-pass cell is
    ``new``, or ``uncharacterised`` when no known-gaps file characterises this feature set (``characterised``)."""
    gaps = list(gaps)
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
            (report.new if characterised else report.uncharacterised).append(item)
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


def render(runner_class: str, cells: Iterable[dict[str, Any]], covered: Iterable[Gap] = ()) -> str:
    """A known-gaps file listing every non-pass cell exactly (the ``--write-known-gaps`` output), except the cells
    that ``covered`` (the entries of all.toml and the family file) already account for."""
    covered = list(covered)
    lines = [f"# Known operator gaps for runner class {runner_class}.",
             "# Written by `perfsuite ops --write-known-gaps`; edit reasons, widen with lists or \"*\". A gap that",
             "# belongs to a backend or library version rather than this machine goes to all.toml or the family",
             "# file with a `when` condition (docs/ops.md).", ""]
    for c in sorted(cells, key=lambda c: (c["op"], c["backend"], c["dtype"], c["shape_class"])):
        if c["worst"] == "pass" or find(covered, c["op"], c["backend"], c["dtype"], c["shape_class"], c["worst"]):
            continue
        lines += ["[[gap]]"] + [f"{k} = {_toml_value(c[k])}" for k in KEYS]
        lines += [f"status = {_toml_value((c['worst'],))}", f"reason = {_toml_value(c.get('detail', '')[:300])}", ""]
    return "\n".join(lines)
