"""What a confirmation finding means for a test (the table in docs/gate.md, "Screen, then confirm"): pure functions
of injected verdicts and findings. A finding is the A/B's answer for one screened (test, metric): B = this working
tree, A = the baselines' commit, both measured now on this machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsuite.facts.vocabulary import pct as _pct
from perfsuite.verdict.sequential import FEW_LOOKS, GRID_HALF_WIDTH, signed_rank_interval, t_interval

KINDS = ("confirmed", "refuted", "inconclusive", "unconfirmed")
# A suspected screen is confirmed by default only if this many A/B pairs of its cell fit the default confirmation's
# budget: fewer pairs than this never decided a change under 10 % in campaigns 9 and 10 (docs/gate-evaluation.md; the
# torch cell's default confirmations there took 33-73 pairs at ~2 s a pair). A cell whose A/B decides on few pairs
# (vLLM: an engine start per side, 31-34 s a pair; docs/gate.md, "vLLM pairs") needs FEW_LOOKS[-1].
MIN_PAIRS = 10


def suspected(v: Any, pair_s: float | None, budget_s: float, min_pairs: int = MIN_PAIRS) -> tuple[bool, str]:
    """Whether an inconclusive screen ``v`` (a perfsuite.verdict.decide.Verdict) is A/B-confirmed by default, and why:
    its interval reaches beyond its threshold, and ``min_pairs`` A/B pairs of its cell (``pair_s`` seconds each, from
    this session's processes; few-pairs cells: the last of FEW_LOOKS) fit the ``budget_s`` of a default confirmation."""
    if v.ratio is None or v.ci_low is None or v.ci_high is None:
        return False, "the screen has no interval"
    worst = v.ci_high - 1 if v.direction != "higher_is_better" else 1 / v.ci_low - 1
    if worst <= v.threshold:
        return False, f"its interval rules out a slowdown beyond {_pct(v.threshold)}"
    if pair_s is not None and min_pairs * pair_s > budget_s:
        return False, (f"one A/B pair of its cell costs ~{pair_s:.0f} s, so {min_pairs} pairs overrun the "
                       f"{budget_s:.0f} s of a default confirmation; --perf-confirm-inconclusive confirms it anyway")
    return True, f"its interval reaches {_pct(worst)}, beyond the {_pct(v.threshold)} threshold"


# The first stage of a suspected screen's A/B (docs/gate.md, "Confirmation by default"): at these pair counts, a
# one-sided signed-rank bound at REFUTE_ALPHA / len(REFUTE_LOOKS) each (Bonferroni over the looks) that excludes a
# slowdown beyond the threshold refutes the metric. It only ever refutes, so the false-alarm rate (confirmed on
# unchanged code) keeps the gate's alpha; what it costs is that a slowdown exactly at the threshold is refuted with
# probability <= REFUTE_ALPHA (a larger one less often). Before it, an unchanged tree waited for the confidence
# sequence at the gate's alpha: 33-61 pairs, 108 s median in campaign 10. The looks: resampling 160 A/A pairs of the
# torch cell (benchmarks/data/first-stage-20261206/), (12, 20) refuted all three metrics by pair 12 in 62 % and by
# pair 20 in 93 % of unchanged trees; (12, 18, 24) and (8, 12, 16, 20) let about half go by pair 12, (10, 15, 20)
# 39 % by pair 10 and 73 % by pair 15.
REFUTE_LOOKS = (12, 20)
REFUTE_ALPHA = 0.05


def first_stage(d: Sequence[float], tau: float, few: bool = False, alpha: float = REFUTE_ALPHA
                ) -> tuple[float, float] | None:
    """``d``: a suspected metric's log(B/A) per pair, ``tau``: its log threshold. At a look (REFUTE_LOOKS; ``few``:
    FEW_LOOKS), the interval whose upper end is the one-sided (1 - alpha / looks) signed-rank bound (``few``:
    Student-t), when that end is below ``tau`` (refuted); otherwise None."""
    looks = FEW_LOOKS if few else REFUTE_LOOKS
    if len(d) not in looks:
        return None
    got = (t_interval if few else signed_rank_interval)(d, 2 * alpha / len(looks))
    return got if got is not None and got[1] < tau else None


def first_stage_applies(screen: str, machine_note: str | None) -> bool:
    """Whether a confirmed metric gets the first stage: a suspected (inconclusive) screen; a screened regression too
    when this machine is not the baselines' one (``machine_note``, perfsuite.orchestrate.confirm.machine), since the
    screen then compares two machines and says no more about the code than a suspicion."""
    return screen == "inconclusive" or (screen == "regression" and bool(machine_note))


def stage_text(few: bool = False) -> str:
    """What a first-stage refutation's line says."""
    looks, test = (FEW_LOOKS, "Student-t") if few else (REFUTE_LOOKS, "signed-rank")
    return f"first stage: the one-sided {100 * (1 - REFUTE_ALPHA / len(looks)):.1f} % {test} bound is below the threshold"


FIRST_STAGE = stage_text()


def equivalent(d: Sequence[float], eps: float, alpha: float = REFUTE_ALPHA) -> tuple[float, float] | None:
    """``perfsuite ab`` on a cell whose A/B decides on few pairs: at a look (FEW_LOOKS), Schuirmann's two one-sided
    tests, each at ``alpha / len(FEW_LOOKS)``: the t interval inside ``(-eps, eps)`` (log scale) makes the metric
    unchanged. It only ever ends an A/B as unchanged (a change exactly at the margin passes with probability <=
    ``alpha``): the false-alarm rate stays the sequence's and the looks' at the gate's alpha."""
    if len(d) not in FEW_LOOKS:
        return None
    got = t_interval(d, 2 * alpha / len(FEW_LOOKS))
    return got if got is not None and -eps < got[0] and got[1] < eps else None


EQUIVALENT = (f"equivalence at a look: the two one-sided {100 * (1 - REFUTE_ALPHA / len(FEW_LOOKS)):.1f} % "
              "Student-t bounds are inside the margin")


def classify(low: float, high: float, estimate: float, tau: float, n: int) -> str:
    """Log-scale interval, Hodges-Lehmann estimate and threshold -> confirmed | refuted | open (below 2 pairs)."""
    if n < 2:
        return "open"
    return "confirmed" if low > 0 and estimate > tau else "refuted" if high < tau else "open"


def settle(low: float, high: float, estimate: float, tau: float, d: Sequence[float], suspected: bool,
           few: bool = False) -> tuple[str, tuple[float, float] | None]:
    """One metric of the confirmation after a pair: :func:`classify` on its confidence sequence (``low``, ``high``,
    ``estimate``: log scale; ``d``: its log-ratios so far) and, for a ``suspected`` screen still open, the first
    stage. (kind, the first stage's interval when it refuted)."""
    kind = classify(low, high, estimate, tau, len(d))
    early = first_stage(d, tau, few) if kind == "open" and suspected else None
    return ("refuted", early) if early is not None else (kind, None)


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
    extra: tuple[str, ...] = ()  # confirmed: lines after the verdict (the library note, the operator diff)
    stage: str = ""  # refuted by the first stage of a suspected screen's A/B: FIRST_STAGE


@dataclass
class Outcome:
    fail: list[str] = field(default_factory=list)  # lines of the failure message
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (GateDrift | GateUnconfirmed | ..., message)
    settled: bool = False  # the screen's inconclusive warning is replaced by the confirmation's

    @property
    def failed(self) -> bool:
        return bool(self.fail)


def interval_text(low: float | None, high: float | None, digits: int = 1) -> str:
    """A B/A interval (relative changes) as messages print it: ``[+4.7%, +21.4%]``. When every shift the sequence can
    represent (0.5x to 2x) is rejected, its interval is that range's edge, twice; it reads as the bound it is,
    ``[beyond +101.4%]``, not as ``[+101.4%, +101.4%]`` beside an estimate of +540 %."""
    edge = math.expm1(GRID_HALF_WIDTH), math.expm1(-GRID_HALF_WIDTH)
    if low is not None and low == high and any(math.isclose(low, e, rel_tol=1e-6) for e in edge):
        return f"[beyond {_pct(low, digits=digits)}]"
    return f"[{_pct(low, digits=digits)}, {_pct(high, digits=digits)}]"


def _ab(f: Finding) -> str:
    return (f"A/B against the baselines' commit {f.commit[:12] or '?'}: B/A {_pct(f.change)} "
            f"{interval_text(f.ci_low, f.ci_high)}, {f.pairs} pair(s)"
            + (f" in {f.elapsed_s:.0f} s" if f.elapsed_s is not None else "") + (f", {f.stage}" if f.stage else ""))


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
            out.fail += f.extra
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


def decided(screen: str, f: Finding | None, *, on_unconfirmed: str, screen_only: bool = False) -> str:
    """What a gated metric ended as, after the confirmation: the end-of-run table's "decided" column and counts.
    ``screen``: the stored-baseline screen's kind; ``f``: the A/B's finding for the metric, if one covered it."""
    if f is None and screen != "regression":  # (a regression no A/B covered is unconfirmed: review does the same)
        if screen == "inconclusive":
            return "inconclusive (screen only)" if screen_only else "inconclusive (not confirmed)"
        return screen
    kind = f.kind if f is not None else "unconfirmed"
    if kind == "confirmed":
        return "REGRESSION (confirmed)"
    if kind == "refuted":
        return "refuted as drift" if screen == "regression" else "unchanged (A/B)"
    if kind == "inconclusive":
        return "inconclusive (A/B undecided)"
    if screen == "regression":
        return "REGRESSION (unconfirmed)" if on_unconfirmed == "fail" else "unconfirmed (passing)"
    return "inconclusive (could not confirm)"

