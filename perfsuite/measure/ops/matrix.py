"""The coverage matrix: op x shape class rows, backend x dtype columns, worst status with counts."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from perfsuite.measure.ops.known_gaps import GapReport
from perfsuite.measure.ops.runner import SEVERITY, OpResult
from perfsuite.measure.ops.shapes import SHAPE_CLASSES

SCHEMA_VERSION = 1


@dataclass
class CellAgg:
    counts: Counter[str] = field(default_factory=Counter)
    worst: str = "pass"
    first_failure: OpResult | None = None
    max_ratio: float = 0.0
    seconds: float = 0.0

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    def add(self, r: OpResult) -> None:
        self.counts[r.status] += 1
        self.seconds += r.seconds
        if r.status != "crash" and r.max_ratio == r.max_ratio:  # not NaN
            self.max_ratio = max(self.max_ratio, r.max_ratio)
        if SEVERITY[r.status] > SEVERITY[self.worst]:
            self.worst = r.status
            self.first_failure = r  # first example with the (new) worst status


class Matrix:
    def __init__(self) -> None:
        self.cells: dict[tuple[str, str, str, str], CellAgg] = {}
        self.skipped: dict[str, str] = {}  # backend -> reason it is not in the matrix

    def add(self, r: OpResult) -> None:
        self.cells.setdefault((r.op, r.shape_class, r.backend, r.dtype), CellAgg()).add(r)

    def columns(self) -> list[tuple[str, str]]:
        return sorted({(b, d) for (_, _, b, d) in self.cells})

    def rows(self) -> list[tuple[str, str]]:
        order = {c: i for i, c in enumerate(SHAPE_CLASSES)}
        ops = list(dict.fromkeys(o for (o, _, _, _) in self.cells))
        return sorted({(o, c) for (o, c, _, _) in self.cells}, key=lambda r: (ops.index(r[0]), order.get(r[1], 99)))

    def cell_dicts(self) -> list[dict[str, Any]]:
        out = []
        for (op, cls, be, dt), a in self.cells.items():
            ff = a.first_failure
            out.append({"op": op, "shape_class": cls, "backend": be, "dtype": dt, "worst": a.worst, "n": a.n,
                        "counts": dict(a.counts), "max_ratio": a.max_ratio if a.max_ratio != float("inf") else "inf",
                        "seconds": round(a.seconds, 4), "detail": ff.detail if ff else "",
                        "repro": ff.repro() if ff else None, "first_failure": ff.as_dict() if ff else None})
        return out

    def to_json(self, meta: dict[str, Any], gaps: GapReport | None = None) -> str:
        return json.dumps({"schema_version": SCHEMA_VERSION, "meta": meta, "skipped_backends": self.skipped,
                           "columns": [f"{b}/{d}" for b, d in self.columns()],
                           "cells": self.cell_dicts(), "gaps": asdict(gaps) if gaps else None},
                          indent=1, default=str)

    def to_markdown(self, meta: dict[str, Any], gaps: GapReport | None = None) -> str:
        cols = self.columns()
        known = {(g["op"], g["shape_class"], g["backend"], g["dtype"]) for g in (gaps.known if gaps else [])}
        lines = [f"# Operator coverage matrix ({meta.get('runner_class', '?')})", ""]
        lines.append(" ".join(f"{k}={v}" for k, v in meta.items() if k in (
            "profile", "bounds", "device", "examples_per_class", "seconds", "torch", "onnxruntime")))
        if meta.get("known_gaps_scope"):
            lines += ["", str(meta["known_gaps_scope"])]
        lines += ["", "Cells: worst status and `n_worst/n` examples; `pass n` when all passed; *(known)* = listed "
                  "in the runner class's known-gaps files.", ""]
        lines.append("| op | shape class | " + " | ".join(f"{b}<br>{d}" for b, d in cols) + " |")
        lines.append("|---|---|" + "---|" * len(cols))
        for op, cls in self.rows():
            row = [op, cls]
            for b, d in cols:
                a = self.cells.get((op, cls, b, d))
                if a is None:
                    row.append("")
                elif a.worst == "pass":
                    row.append(f"pass {a.n}")
                else:
                    tag = " *(known)*" if (op, cls, b, d) in known else ""
                    row.append(f"**{a.worst.upper()}** {a.counts[a.worst]}/{a.n}{tag}")
            lines.append("| " + " | ".join(row) + " |")
        if self.skipped:
            lines += ["", "Backends not in the matrix: " + "; ".join(f"{b}: {r}" for b, r in self.skipped.items())]
        if gaps is not None:
            sections = [("New gaps (fail the run)", gaps.new), ("Known gaps", gaps.known)]
            if gaps.uncharacterised:
                fails = "failed: --strict" if meta.get("strict") else "not failed without --strict"
                sections.insert(1, (f"Not yet characterised on {meta.get('features', 'this feature set')} (no "
                                    f"known-gaps file characterises it; {fails})", gaps.uncharacterised))
            for title, items in sections:
                lines += ["", f"## {title}: {len(items)}", ""]
                for g in items:
                    lines.append(f"* `{g['op']}` / {g['shape_class']} / {g['backend']} / {g['dtype']}: "
                                 f"**{g['worst']}**: {g.get('detail', '')}")
                    if g.get("repro"):
                        lines.append(f"  repro: `perfsuite ops --repro '{json.dumps(g['repro'])}'`")
            lines += ["", f"## Fixed gaps (entries to delete): {len(gaps.fixed)}", ""]
            lines += [f"* {g['gap']} ({g['reason']})" for g in gaps.fixed]
        return "\n".join(lines) + "\n"
