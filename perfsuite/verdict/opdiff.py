"""Which operators a confirmed regression moved: per-operator time of A and B from a few profile pairs (each pair one
fresh process per side, its generations under the backend's profiler: perfsuite.measure.opprofile), as ms per
generated token, A -> B.

Processes differ in speed as a whole (a busy neighbour, the process's memory layout) far more than the code's change
moves one operator, so each process's operators are read as shares of its own total, and B's total is set to A's times
the timed A/B's ratio (``ratio``: measured over many pairs, it is the size of the change; the profiles say where it
went). An operator's *excess* is what it took beyond a proportional share of the change; it is *claimed* when the
excess is outside the pairs' own noise (a paired t interval above zero) and at least ``min_share`` of the change.
The verdicts and marks: docs/gate.md ("Operators: where the time went")."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from scipy import stats

Table = Mapping[str, Any]  # one side's profile: {"tokens": N, "ops": {operator: ms}, ...}
OUTSIDE_SHARE = 0.5  # the operators explain less than this share of the timed change: the change is outside them
NOISE_TIMES = 4.0  # ... and the timed change is this many times the half-width of the profiles' own interval


@dataclass(frozen=True)
class OpRow:
    op: str
    a_ms: float  # per generated token, the mean over pairs
    b_ms: float
    low: float  # the interval of the excess (beyond a proportional share of the change) over the pairs
    high: float
    share: float | None  # of the whole change; None when the whole change is not clear
    claimed: bool
    status: str = ""  # new | gone | ""

    @property
    def delta(self) -> float:
        return self.b_ms - self.a_ms


@dataclass(frozen=True)
class OpDiff:
    pairs: int
    tool: str
    a_ms: float  # all operators, per token
    b_ms: float  # A's times the ratio
    low: float  # the profiles' own ratio of totals (B / A)
    high: float  # the ratio used: the timed A/B's, else the profiles'
    verdict: str  # claimed | spread | outside | unclear | unprofiled
    rows: tuple[OpRow, ...] = ()
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rows"] = [{**asdict(r), "delta": r.delta} for r in self.rows]
        return out


def _interval(deltas: Sequence[float], level: float) -> tuple[float, float, float]:
    mean = math.fsum(deltas) / len(deltas)
    if len(deltas) < 2:
        return mean, -math.inf, math.inf
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in deltas) / (len(deltas) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, len(deltas) - 1)) * sd / math.sqrt(len(deltas))
    return mean, mean - half, mean + half


def per_token(table: Table) -> dict[str, float]:
    n = max(int(table.get("tokens") or 0), 1)
    return {op: ms / n for op, ms in (table.get("ops") or {}).items()}


def diff(pairs: Sequence[tuple[Table, Table]], *, ratio: float | None = None, min_share: float = 0.15,
         level: float = 0.95, top: int = 8) -> OpDiff:
    """The operator diff of profile ``pairs`` (A's table, B's table), largest changes first. ``ratio``: B / A of the
    timed A/B (None: the profiles' own ratio of totals, noisier)."""
    usable = [(a, b) for a, b in pairs if a.get("ops") and b.get("ops")]
    tool = next((str(t.get("tool")) for p in usable for t in p if t.get("tool")), "")
    if len(usable) < 2:
        why = next((str(t.get("skip") or t.get("error")) for p in pairs for t in p if t.get("skip") or t.get("error")),
                   "fewer than two profile pairs")
        return OpDiff(len(usable), tool, math.nan, math.nan, math.nan, math.nan, "unprofiled", reason=why)
    a_tabs, b_tabs = ([per_token(pair[side]) for pair in usable] for side in (0, 1))
    a_tot, b_tot = ([math.fsum(t.values()) for t in tabs] for tabs in (a_tabs, b_tabs))
    own_log, _, own_hi = _interval([math.log(b / a) for a, b in zip(a_tot, b_tot, strict=True)], level)
    own = math.exp(own_log)
    # Time outside every operator (a sleep, a lock, I/O, Python between operators) is in the timed ratio but not in
    # the profiles' totals: when even their upper bound explains less than half of the timed change, and that change
    # is large against the profiles' own noise (NOISE_TIMES their interval's half-width, so a small change that the
    # pairs could not see is not called outside), say so, and show the operators at the profiles' own ratio rather
    # than scale them up to a change they did not make.
    outside = bool(ratio and ratio > 1 and math.expm1(own_hi) < OUTSIDE_SHARE * (ratio - 1)
                   and math.log(ratio) > NOISE_TIMES * (own_hi - own_log))
    r = own if outside or not ratio else ratio
    scale = [r * a / b for a, b in zip(a_tot, b_tot, strict=True)]  # B's table onto A's total times the ratio
    a_mean = math.fsum(a_tot) / len(a_tot)
    change = (r - 1) * a_mean  # the whole change, ms per token
    rows = []
    for op in sorted({op for t in a_tabs + b_tabs for op in t}):
        a = [t.get(op, 0.0) for t in a_tabs]
        b = [t.get(op, 0.0) * s for t, s in zip(b_tabs, scale, strict=True)]
        excess, low, high = _interval([y - x * r for x, y in zip(a, b, strict=True)], level)
        a_ms, b_ms = math.fsum(a) / len(a), math.fsum(b) / len(b)
        share = (b_ms - a_ms) / change if change > 0 else None
        status = "new" if not any(a) else "gone" if not any(t.get(op) for t in b_tabs) else ""
        claimed = change > 0 and low > 0 and excess >= min_share * change
        rows.append(OpRow(op, a_ms, b_ms, low, high, share, claimed, status))
    rows.sort(key=lambda row: -abs(row.delta))
    verdict = "outside" if outside else "claimed" if any(row.claimed for row in rows) else \
        "spread" if change > 0 else "unclear"
    return OpDiff(len(usable), tool, a_mean, a_mean + change, own, r, verdict, tuple(rows[:top]),
                  extra={"profiles_ratio": own, "ratio": r, "timed_ratio": ratio,
                         "ratio_source": "timed A/B" if ratio and not outside else "profiles"})


def lines(d: OpDiff) -> list[str]:
    """The operator diff in words: the verdict, then one line per operator (ms/token A -> B, change, share)."""
    if d.verdict == "unprofiled":
        return [f"operators: not profiled ({d.reason})"]
    src = d.extra.get("ratio_source", "")
    head = (f"operators ({d.tool}; {d.pairs} profile pairs, ms per generated token, B scaled to the {src} ratio "
            f"{(d.high - 1) * 100:+.1f}%; the profiles' own ratio {(d.low - 1) * 100:+.1f}%): all {d.a_ms:.4f} -> "
            f"{d.b_ms:.4f}")
    if d.verdict == "outside":
        timed = d.extra["timed_ratio"]
        say = (f"most of the change is outside the operators' time: their total moved {(d.low - 1) * 100:+.1f}% "
               f"against the timed {(timed - 1) * 100:+.1f}%; look for waits, sleeps, locks, I/O or Python between "
               f"operators (the trace shows the gaps)")
    elif d.verdict == "claimed":
        say = f"the change is in {', '.join(r.op for r in d.rows if r.claimed)}"
    elif d.verdict == "spread":
        say = (f"spread over many operators: none took a clear share beyond its size; the largest are "
               f"{', '.join(r.op for r in d.rows[:3])}")
    else:
        say = "no slowdown to attribute (B is not slower than A)"
    out = [head, "  " + say]
    for r in d.rows:
        change = {"new": "new", "gone": "gone"}.get(r.status) or f"{(r.b_ms / r.a_ms - 1) * 100:+.0f}%"
        share = f"{r.share * 100:+.0f}% of the change" if r.share is not None else ""
        mark = " *" if r.claimed else ""
        out.append(f"  {r.op:<48} {r.a_ms:.4f} -> {r.b_ms:.4f}  {change:>6}  {share}{mark}")
    if d.verdict == "claimed":
        out.append("  (* claimed: it took more than its proportional share, outside the profile pairs' noise)")
    return out
