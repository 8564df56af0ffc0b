"""Formatting: the verdict table (pytest terminal summary, ``perfsuite compare``), one-line descriptions, and
the hint that turns an inconclusive verdict into an A/B that would settle it."""

from __future__ import annotations

import math
import shlex
from collections import Counter
from collections.abc import Sequence

from perfsuite.facts.vocabulary import pct
from perfsuite.verdict.decide import KINDS, Verdict


def _n(v: float | None) -> str:
    return "n/a" if v is None else f"{int(v)}" if float(v).is_integer() else f"{v:.4g}"


def describe(v: Verdict) -> str:
    if v.exact:
        return (f"{v.metric}: {v.kind}: {_n(v.current_value)} vs baseline {_n(v.baseline_value)}"
                + (f" (tolerance {v.threshold:g})" if v.threshold else "") + (f"; {v.note}" if v.note else ""))
    if v.kind == "incomparable" or v.ratio is None:
        return f"{v.metric}: {v.kind}" + (f": {v.note}" if v.note else "")
    p = "n/a" if v.p_worse is None else f"{v.p_worse:.2g}"
    return (f"{v.metric}: {v.kind}: {v.change()} (ratio {_n(v.ratio)}, {(1 - 2 * v.alpha) * 100:.4g}% CI "
            f"{v.interval()}, threshold {v.threshold * 100:g}%, MDE {pct(v.mde, signed=False)}, p={p}, {v.method}, "
            f"runs {v.n_baseline} vs {v.n_current})" + (f"; {v.note}" if v.note else ""))


def table(verdicts: Sequence[Verdict], holm_p: Sequence[float | None] | None = None,
          decided: Sequence[str] | None = None) -> list[str]:
    """One row per gated metric: verdict, change, interval, MDE, threshold, p (Holm-adjusted if given). With
    ``decided`` (what each metric ended as after the confirmation), the screen's columns are labelled as the
    screen's, a "decided" column follows, and the counts of the decisions come last."""
    if not verdicts:
        return []
    rows: list[tuple[str, ...]] = [("benchmark", "metric", "screen" if decided else "verdict", "change", "interval", "MDE", "thresh",
             "p" if holm_p is None else "p(Holm)", "runs", "note")]
    for i, v in enumerate(verdicts):
        p = holm_p[i] if holm_p is not None else v.p_worse
        if v.exact:
            change = f"{_n(v.current_value)} vs {_n(v.baseline_value)}"
            interval, mde, thr = "exact", "", (f"±{v.threshold:g}" if v.threshold else "=")
        else:
            change, interval = v.change(), v.interval()
            mde = "" if v.mde is None else f"{v.mde * 100:.1f}%"
            thr = f"{v.threshold * 100:g}%"
        rows.append((v.test.split("::")[-1], v.metric, v.kind.upper() if v.failed else v.kind, change, interval, mde,
                     thr, "" if p is None else f"{p:.2g}", f"{v.n_baseline}/{v.n_current}", v.note))
    if decided:  # the decision before the unpadded note
        rows = [(*r[:-1], d, r[-1]) for r, d in zip(rows, ["decided", *decided], strict=True)]
    out = aligned(rows)
    counts = {k: sum(v.kind == k for v in verdicts) for k in KINDS}
    screened = ", ".join(f"{n} {k}" for k, n in counts.items() if n) + f" of {len(verdicts)} gated metrics"
    if not decided:
        out.append(screened)
        return out
    out.append("decided: " + ", ".join(f"{n} {d}" for d, n in Counter(decided).most_common())
               + f" of {len(verdicts)} gated metrics")
    out.append(f"(the stored-baseline screen alone, before the A/B: {screened})")
    return out


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows (the first is the header) as left-aligned columns under a rule; the last column (a note) unpadded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + ("  " + r[-1] if r[-1] else "")
           for r in rows]
    out.insert(1, "-" * min(160, len(out[0])))
    return out


def ab_command(cell_id: str, base_ref: str | None, budget_s: float | None) -> str:
    """The `perfsuite ab` run that settles a comparison the stored baselines could not."""
    ref = base_ref or "<baseline commit>"
    budget = "10m" if budget_s is None else _duration(budget_s)
    return (f"git worktree add ../perfsuite-base {shlex.quote(ref)} && perfsuite ab --a ../perfsuite-base --b . "
            f"--cells {shlex.quote(cell_id)} --budget {budget}")


def _duration(seconds: float) -> str:
    seconds = max(30.0, seconds)
    if seconds < 600:
        return f"{math.ceil(seconds / 30) * 30:.0f}s"
    return f"{math.ceil(seconds / 60):.0f}m"
