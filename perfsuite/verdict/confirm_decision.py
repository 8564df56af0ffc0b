"""What a confirmation finding means for a test (the table in docs/gate.md, "Screen, then confirm"): pure functions
of injected verdicts and findings. A finding is the A/B's answer for one screened (test, metric): B = this working
tree, A = the baselines' commit, both measured now on this machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from perfsuite.facts.vocabulary import pct as _pct

KINDS = ("confirmed", "refuted", "inconclusive", "unconfirmed")


def classify(low: float, high: float, estimate: float, tau: float, n: int, min_pairs: int = 2) -> str:
    """Log-scale interval, Hodges-Lehmann estimate and threshold -> confirmed | refuted | open."""
    if n < min_pairs:
        return "open"
    if low > 0 and estimate > tau:
        return "confirmed"
    if high < tau:
        return "refuted"
    return "open"


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    metric: str
    change: float | None = None  # B / A - 1 (as measured: > 0 is slower for latencies)
    ci_low: float | None = None  # relative, always-valid interval of B / A - 1
    ci_high: float | None = None
    pairs: int = 0
    mde: float | None = None  # inconclusive: smallest slowdown this many pairs detect
    drift: float | None = None  # A measured now / the baseline runs - 1: this machine's change since recording
    a_value: float | None = None
    baseline_value: float | None = None
    reason: str = ""  # unconfirmed: the reason and the fix, one line
    commit: str = ""  # the baselines' commit (A)
    elapsed_s: float | None = None
    threads: int | None = None  # OMP_NUM_THREADS both sides ran with (machine.cotenant; None: the cells' default)


@dataclass
class Outcome:
    fail: list[str] = field(default_factory=list)  # lines of the failure message
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (GateDrift | GateUnconfirmed | ..., message)
    settled: bool = False  # the screen's inconclusive warning is replaced by the confirmation's

    @property
    def failed(self) -> bool:
        return bool(self.fail)


def _ab(f: Finding) -> str:
    return (f"A/B against the baselines' commit {f.commit[:12] or '?'}: B/A {_pct(f.change)} "
            f"[{_pct(f.ci_low)}, {_pct(f.ci_high)}], {f.pairs} pair(s)"
            + (f" in {f.elapsed_s:.0f} s" if f.elapsed_s is not None else ""))


def drift_text(f: Finding) -> str:
    if f.drift is None:
        return "this machine's level against the baseline runs is unknown"
    way = "slower" if f.drift > 0 else "faster"
    level = ""
    if f.threads is not None:  # the A/B's workers ran at other threads than the cell's (perfsuite.machine.cotenant)
        level = (f" (the A/B ran both sides with OMP_NUM_THREADS={f.threads}, so A's level is estimated at the cell's "
                 f"own threads as this session's screen of B over the A/B's B/A)")
    elif f.a_value is not None and f.baseline_value is not None:
        level = f" ({f.metric} of A now {f.a_value:.4g} vs {f.baseline_value:.4g} in the baseline runs)"
    return f"this machine runs {abs(f.drift) * 100:.1f}% {way} than when the baselines were recorded{level}"


def review(name: str, screened: Sequence[tuple[str, str, Finding | None]], *, on_unconfirmed: str,
           fail_on_inconclusive: bool) -> Outcome:
    """``screened``: (metric, the screen's kind: regression | inconclusive, its finding or None when no A/B
    covered it) for one test ``name``."""
    out = Outcome()
    for metric, screen, f in screened:
        if f is None:
            f = Finding("unconfirmed", metric, reason="no confirmation ran for this metric")
        head = f"perfsuite confirm: {name} {metric}"
        out.settled |= f.kind != "unconfirmed"  # the confirmation's word replaces the screen's inconclusive one
        if f.kind == "confirmed":
            out.fail.append(f"{head}: regression confirmed: {_ab(f)}; {drift_text(f)}")
        elif f.kind == "refuted":
            if screen == "regression":
                out.warnings.append(("GateDrift", f"{head}: the stored baselines say regression, the A/B refutes it "
                                     f"({_ab(f)}): drift, not code; {drift_text(f)}; re-record the baselines in this "
                                     "machine's current state (pytest tests/perf --perf-update-baselines), or gate "
                                     "with `perfsuite ab` (both trees measured at the same time)"))
        elif f.kind == "inconclusive":
            msg = (f"{head}: the A/B could not decide in its budget ({_ab(f)}, MDE {_pct(f.mde)}); "
                   f"{drift_text(f)}; raise [tool.perfsuite.gate] confirm_budget or run `perfsuite ab` longer")
            if fail_on_inconclusive:
                out.fail.append(msg + " (failing because of --perf-fail-on-inconclusive)")
            else:
                out.warnings.append(("GateInconclusive", msg))
        elif screen == "regression":  # unconfirmed: the policy decides
            msg = f"{head}: cannot confirm the stored-baseline regression: {f.reason}"
            if on_unconfirmed == "fail":
                out.fail.append(msg + ' (failing: [tool.perfsuite.gate] on_unconfirmed = "fail")')
            else:
                out.warnings.append(("GateUnconfirmed", msg + ' (passing: on_unconfirmed = "warn")'))
        else:  # an inconclusive screen that could not be confirmed stays the screen's inconclusive warning
            out.warnings.append(("GateUnconfirmed", f"{head}: cannot confirm: {f.reason}"))
    return out
