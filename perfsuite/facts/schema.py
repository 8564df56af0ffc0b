"""One validation mechanism for every TOML table perfsuite reads (docs/architecture.md): a table declares its keys as
:class:`Field` values; a field says whether a value is allowed (:meth:`Field.problem`) and what is
(:meth:`Field.expects`), and each table keeps its own wording around those phrases (tests pin them).
:func:`first_unknown` is the unknown-key check all tables share. Imports nothing heavy."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from perfsuite.facts.errors import UsageError

KINDS = ("bool", "int", "float", "str", "strs", "table", "duration")

_TYPE_PHRASE = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "strs": "a non-empty list of strings",
    "table": "a table of string/number/boolean values",
    "duration": 'a duration such as "90s", "3m" or "1h"',
}


def toml(v: Any) -> str:
    """A value as it is written in TOML: true, "text", 3."""
    return ("true" if v else "false") if isinstance(v, bool) else (f'"{v}"' if isinstance(v, str) else str(v))


def num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def first_unknown(keys: Iterable[Any], allowed: Iterable[str]) -> str | None:
    """The first (sorted) key that is not allowed, or None."""
    bad = sorted(set(map(str, keys)) - set(allowed))
    return bad[0] if bad else None


def checked(label: str, value: Any, spec: Field, error: type[Exception] = ValueError) -> Any:
    """``value`` if ``spec`` allows it, else ``error`` in the wording of ``[tool.perfsuite]``'s tables:
    ``<label> must be an integer >= 1, got 0`` or ``<label>: 'fp8' is not one of float32, bfloat16``."""
    problem = spec.problem(value)
    if problem and problem[0] == "choice":
        raise error(f"{label}: {spec.bad_choice(value)!r} is not one of {', '.join(map(str, spec.choices or ()))}")
    if problem:
        raise error(f"{label} must be {spec.expects(words=True)}, got {value!r}")
    return tuple(value) if spec.kind == "strs" else value


def parse_duration(text: str, what: str = "--budget") -> float:
    """``90s``, ``2m``, ``1h30m``, ``1.5m`` or plain seconds -> seconds; a clear UsageError otherwise."""
    t = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*(h|m|min|s|sec)", t)
        if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*(h|m|min|s|sec)", "", t).strip():
            raise UsageError(f"{what} {text!r} is not a duration; write e.g. 90s, 2m, 5m or 1h")
        unit = {"h": 3600, "m": 60, "min": 60, "s": 1, "sec": 1}
        seconds = sum(float(n) * unit[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"{what} {text!r} must be longer than 0 s")
    return seconds


def duration_s(v: Any) -> float | None:
    """``"90s"``, ``"3m"``, ``"1h30m"`` or a positive number of seconds -> seconds; None if it is not one."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return None
    try:
        return parse_duration(str(v), "duration")
    except UsageError:
        return None


@dataclass(frozen=True)
class Field:
    """One key of a table: its kind (one of :data:`KINDS`), help, and allowed values or range."""

    kind: str
    doc: str = ""
    choices: tuple[Any, ...] | None = None  # allowed values (for "strs": allowed elements)
    minimum: float | None = None
    maximum: float | None = None
    min_open: bool = False  # the minimum itself is not allowed
    max_open: bool = False
    fold_case: bool = False  # strings compare to choices in lower case
    workload: bool = True  # backend options: False if it changes only diagnostics or load time (not hashed)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Field kind {self.kind!r}: use one of {', '.join(KINDS)}")

    def type_ok(self, v: Any) -> bool:
        k = self.kind
        if k == "bool":
            return isinstance(v, bool)
        if k == "int":
            return isinstance(v, int) and not isinstance(v, bool)
        if k == "float":
            # inf only where a bound says so (an absolute tolerance in [0, inf]); nan never
            return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and (
                math.isfinite(v) or math.inf in (self.maximum, -(self.minimum or 0.0)))
        if k == "str":
            return isinstance(v, str)
        if k == "strs":
            return isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)
        if k == "duration":
            return duration_s(v) is not None
        return isinstance(v, Mapping) and all(isinstance(a, str) and isinstance(b, (str, int, float, bool))
                                              for a, b in v.items())

    def bad_choice(self, v: Any) -> Any | None:
        """The value (or, for a list, the first element) outside ``choices``; None if all are allowed."""
        if self.choices is None:
            return None
        for x in (v if self.kind == "strs" else [v]):
            got = x.lower() if self.fold_case and isinstance(x, str) else x
            if got not in self.choices:
                return x
        return None

    def problem(self, v: Any) -> tuple[str, str] | None:
        """None if ``v`` is allowed, else ``(facet, phrase)``: ``("type", "an integer")``, ``("choice", 'one of
        "a", "b"')`` or ``("range", ">= 14")``, checked in that order."""
        if not self.type_ok(v):
            return "type", _TYPE_PHRASE[self.kind]
        if self.bad_choice(v) is not None:
            return "choice", "one of " + ", ".join(toml(c) for c in self.choices or ())
        lo, hi = self.minimum, self.maximum
        if self.kind in ("int", "float") and lo is not None and (v <= lo if self.min_open else v < lo):
            return "range", Field(self.kind, minimum=lo, min_open=self.min_open).bounds()  # the side it broke: ">= 14"
        if self.kind in ("int", "float") and hi is not None and (v >= hi if self.max_open else v > hi):
            return "range", Field(self.kind, maximum=hi, max_open=self.max_open).bounds()  # "<= 1"
        return None

    def bounds(self, words: bool = False) -> str:
        """``>= 1``, ``<= 1``, ``in [0, 1)``, or with ``words`` ``from 0 to 1024`` (closed bounds only)."""
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            if words and not (self.min_open or self.max_open):
                return f"from {num(lo)} to {num(hi)}"
            return f"in {'(' if self.min_open else '['}{num(lo)}, {num(hi)}{')' if self.max_open else ']'}"
        if lo is not None:
            return f"{'>' if self.min_open else '>='} {num(lo)}"
        if hi is not None:
            return f"{'<' if self.max_open else '<='} {num(hi)}"
        return ""

    def expects(self, words: bool = False) -> str:
        """What is allowed, as one phrase: ``an integer >= 1``, ``a number in (0, 0.5)``, ``true or false``."""
        if self.choices is not None and self.kind != "strs":
            return "one of " + ", ".join(toml(c) for c in self.choices)
        rng = self.bounds(words) if self.kind in ("int", "float") else ""
        return f"{_TYPE_PHRASE[self.kind]} {rng}".strip()
