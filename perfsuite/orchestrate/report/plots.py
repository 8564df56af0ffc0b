"""Plots as inline SVG text (matplotlib, Agg): no JavaScript, no CDN, text kept as text (small, selectable)."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "perfsuite", "font.size": 9,
                            "axes.spines.top": False, "axes.spines.right": False})

RED, GREEN, BLUE, GREY = "#c0392b", "#1e8449", "#2c6fbb", "#9aa0a6"
STATUS_COLOURS = {"pass": "#7fbf7f", "unsupported": "#c8c8c8", "tolerance": "#f5b041", "mismatch": "#e67e22",
                  "error": "#c0392b", "crash": "#7b241c", "timeout": "#884ea0", "absent": "#ffffff"}


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = re.sub(r"^(<\?xml[^>]*>\s*)?(<!DOCTYPE[^>]*>\s*)?", "", buf.getvalue())
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)  # RDF boilerplate, nothing to show


def series(values: Sequence[float], labels: Sequence[str], changes: Sequence[tuple[int, float, float, bool]],
           title: str, unit: str) -> str:
    """One history series; ``changes`` = (index, median before, median after, is_regression) per change point."""
    fig, ax = plt.subplots(figsize=(7.2, 2.4))
    x = list(range(len(values)))
    ax.plot(x, values, color=BLUE, lw=1, marker="o", ms=2.5)
    edges = [0, *(c[0] for c in changes), len(values)]
    meds = [changes[0][1], *(c[2] for c in changes)] if changes else []
    for i, m in enumerate(meds):
        ax.hlines(m, edges[i], edges[i + 1] - 1, colors=GREY, lw=2, alpha=0.8)
    for idx, before, after, regression in changes:
        colour = RED if regression else GREEN
        ax.axvline(idx - 0.5, color=colour, ls="--", lw=1.2)
        ax.annotate(f"{after / before - 1:+.1%}", (idx - 0.5, max(values)), color=colour, fontsize=8,
                    xytext=(3, 0), textcoords="offset points", va="top")
    step = max(1, math.ceil(len(x) / 6))
    ax.set_xticks(x[::step], [labels[i] for i in x[::step]], rotation=0, fontsize=7, linespacing=1.1)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=9, loc="left")
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def _value_lists(payload: dict[str, Any]) -> tuple[list[float], list[float]] | None:
    for a_key, b_key in (("a_values", "b_values"), ("a_samples", "b_samples"), ("a", "b")):
        a, b = payload.get(a_key), payload.get(b_key)
        if isinstance(a, list) and isinstance(b, list) and a and b and all(
                isinstance(v, (int, float)) for v in [*a, *b]):
            return [float(v) for v in a], [float(v) for v in b]
    return None


def ab(verdicts: Sequence[dict[str, Any]]) -> str | None:
    """A/B: per verdict the B/A ratio with its interval, and the A and B values when the result carries them."""
    rows = [v for v in verdicts if isinstance(v.get("ratio"), (int, float))]
    if not rows:
        return None
    with_values = [(v, vals) for v in rows if (vals := _value_lists(v.get("payload", {})))]
    ncols = 2 if with_values else 1
    fig, axes = plt.subplots(1, ncols, figsize=(7.2 if ncols == 2 else 5.5, 0.45 * len(rows) + 1.0), squeeze=False)
    ax = axes[0][0]
    for i, v in enumerate(rows):
        p = v.get("payload", {})
        colour = RED if v.get("verdict") == "regression" else GREEN if v.get("verdict") == "improvement" else BLUE
        lo, hi = p.get("ci_low"), p.get("ci_high")
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
            ax.hlines(i, lo, hi, colors=colour, lw=2)
        ax.plot(v["ratio"], i, "o", color=colour)
    ax.axvline(1.0, color=GREY, lw=1)
    ax.set_yticks(range(len(rows)), [f"{str(v.get('test'))[:38]} {v.get('metric')}" for v in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("B / A (interval of the verdict)")
    ax.set_title("A/B verdicts", fontsize=9, loc="left")
    if with_values:
        bx = axes[0][1]
        data = [xs for _, ab_values in with_values for xs in ab_values]
        names = [f"{side} {str(v.get('metric'))[:10]}" for v, _ in with_values for side in "AB"]
        bp = bx.boxplot(data, orientation="horizontal", patch_artist=True, widths=0.6)
        for j, patch in enumerate(bp["boxes"]):
            patch.set_facecolor("#d6e4f5" if j % 2 == 0 else "#f5d6d6")
        for j, d in enumerate(data):
            bx.plot(d, [j + 1] * len(d), "|", color="#333333", ms=6, alpha=0.6)
        bx.set_yticks(range(1, len(names) + 1), names, fontsize=7)
        bx.invert_yaxis()
        bx.set_title("A and B values (per process)", fontsize=9, loc="left")
    return _svg(fig)


def ops_matrix(ops: dict[str, Any]) -> str | None:
    """The coverage matrix as a heat map: (op, shape class) x (backend/dtype), coloured by worst status."""
    cells = ops.get("cells") or []
    if not cells:
        return None
    cols = sorted({f"{c['backend']}/{c['dtype']}" for c in cells})
    rows = sorted({(c["op"], c["shape_class"]) for c in cells})
    status = {((c["op"], c["shape_class"]), f"{c['backend']}/{c['dtype']}"): c["worst"] for c in cells}
    fig, ax = plt.subplots(figsize=(1.2 + 0.75 * len(cols), 0.5 + 0.17 * len(rows)))
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            s = status.get((r, c), "absent")
            ax.add_patch(plt.Rectangle((j, i), 0.95, 0.9, color=STATUS_COLOURS.get(s, "#555555"), lw=0))
            if s not in ("pass", "absent"):
                ax.text(j + 0.47, i + 0.45, s[:5], ha="center", va="center", fontsize=5)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.47 for j in range(len(cols))], cols, rotation=35, ha="right", fontsize=7)
    ax.set_yticks([i + 0.45 for i in range(len(rows))], [f"{o} / {s}" for o, s in rows], fontsize=6)
    ax.tick_params(length=0)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    present = [n for n in STATUS_COLOURS if n in status.values()]
    handles = [plt.Rectangle((0, 0), 1, 1, color=STATUS_COLOURS[n]) for n in present]
    ax.legend(handles, present, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, frameon=False)
    ax.set_title("Operator coverage (worst status of the examples)", fontsize=9, loc="left")
    return _svg(fig)
