"""The table printed by the pytest terminal summary, ``perfsuite compare`` and ``perfsuite ab``."""

from __future__ import annotations

from collections.abc import Sequence

from perfsuite.gate.verdict import Verdict

_MARK = {"regression": "REGRESSION", "improvement": "improvement", "unchanged": "unchanged",
         "inconclusive": "inconclusive"}


def table(verdicts: Sequence[Verdict], holm_p: Sequence[float | None] | None = None) -> list[str]:
    """One row per gated metric: verdict, change, interval, MDE, threshold, p (Holm-adjusted if given)."""
    if not verdicts:
        return []
    rows = [("benchmark", "metric", "verdict", "change", "interval", "MDE", "thresh", "p" if holm_p is None
             else "p(Holm)", "runs", "note")]
    for i, v in enumerate(verdicts):
        p = holm_p[i] if holm_p is not None else v.p_worse
        if v.exact:
            change = f"{_n(v.current_value)} vs {_n(v.baseline_value)}"
            interval, mde, thr = "exact", "", (f"±{v.threshold:g}" if v.threshold else "=")
        else:
            change, interval = v.change(), v.interval()
            mde = "" if v.mde is None else f"{v.mde * 100:.1f}%"
            thr = f"{v.threshold * 100:g}%"
        note = v.note
        if v.kind == "inconclusive" and v.more_runs:
            note = f"~{v.more_runs} more run(s) would settle it" + (f"; {note}" if note else "")
        rows.append((v.test.split("::")[-1], v.metric, _MARK[v.kind], change, interval, mde, thr,
                     "" if p is None else f"{p:.2g}", f"{v.n_baseline}/{v.n_current}", note))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + ("  " + r[-1] if r[-1] else ""))
    out.insert(1, "-" * min(160, len(out[0])))
    counts = {k: sum(v.kind == k for v in verdicts) for k in _MARK}
    out.append(", ".join(f"{n} {k}" for k, n in counts.items() if n) + f" of {len(verdicts)} gated metrics")
    return out


def _n(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{int(v)}" if float(v).is_integer() else f"{v:.4g}"
