"""Sequential A/B decision with an always-valid confidence sequence (testing by betting). The method and its figures:
docs/gate.md, "Sequential decision with an always-valid confidence sequence", "The budget's end spends the other half
of alpha" and "vLLM pairs: few pairs decide".

Data: one value per randomized pair, ``d_i = log(B_i / A_i)``, symmetric about the true shift whatever the noise (the
coin-flip order inside a pair). For each candidate shift ``m`` on a grid the wealth ``W_n(m) = prod_i (1 + lambda_i(m)
* g((d_i - m) / c_i))`` bets on the sign of ``d_i - m``: ``g`` clipped to [-1, 1] (one wild pair moves the wealth by at
most a factor 1 +- lambda), a scale ``c_i`` and bets ``lambda_i`` in [-1/2, 1/2] from past pairs only (predictable).
By Ville's inequality the shifts whose wealth never reached the threshold cover the true one at every n at once
(Waudby-Smith & Ramdas 2023, JRSS-B).

The sequence runs at ``(1 - FINAL_SHARE) * alpha``; a stop blind to the values (budget, pair cap) closes it and
intersects its interval with Wilcoxon's signed-rank interval at ``FINAL_SHARE * alpha``. A sequence with ``looks``
(few pairs: vLLM) spends that share on Student-t intervals at fixed pair counts instead (Bonferroni over the looks),
each kept once taken.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

GRID_HALF_WIDTH = 0.7  # log-ratio: shifts of 0.5x to 2x are representable
GRID_STEP = 0.0005  # 0.05 % resolution
LAMBDA_MAX = 0.5
SCALE_FLOOR = 0.005  # never bet on a scale finer than 0.5 %
SCALE_PRIOR = 0.05  # scale before 3 pairs are in: 5 %, this VM's between-process spread order of magnitude
FINAL_SHARE = 0.5  # of alpha: the fixed-n signed-rank test at a budget stop; the rest is the sequence's
EXACT_MAX_N = 200  # the signed-rank statistic's exact null distribution up to this many pairs, normal beyond
FEW_LOOKS = (4, 5)  # the pair counts at which a few-pairs sequence takes its t intervals (module doc)


def hodges_lehmann(d: Sequence[float], max_pairs: int = 60_000) -> float:
    """Median of the Walsh averages (d_i + d_j)/2, i <= j: the location estimate that matches a symmetric shift.
    Past ``max_pairs`` Walsh averages a fixed-seed random subset of them is used (the estimate's own noise is then
    far below the data's)."""
    x = np.asarray(d, dtype=float)
    n = x.size
    if n == 0:
        return math.nan
    if n * (n + 1) // 2 <= max_pairs:
        i, j = np.triu_indices(n)
    else:
        rng = np.random.default_rng(n)
        i, j = rng.integers(0, n, max_pairs), rng.integers(0, n, max_pairs)
    return float(np.median((x[i] + x[j]) / 2))


def robust_sd(d: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation (the SD of normal values); the SD when that is 0. ``statistics`` on
    floats: the same values as numpy's, without its per-call overhead (a sequence computes it at every pair)."""
    if len(d) < 2:
        return math.nan
    centre = statistics.median(d)
    mad = statistics.median([abs(float(x) - centre) for x in d]) * 1.4826
    return mad if mad > 0 else float(np.std(np.asarray(d, dtype=float), ddof=1))


def signed_rank_interval(d: Sequence[float], alpha: float) -> tuple[float, float] | None:
    """Two-sided (1 - alpha) interval for the centre of symmetry of ``d`` from Wilcoxon's signed-rank test: the
    c-th smallest and c-th largest Walsh average, c the largest count with P(W+ <= c - 1) <= alpha / 2 under the
    null (exact up to EXACT_MAX_N values, normal with continuity correction beyond). ``None`` when there are too
    few values for any interval at this alpha (5 values need alpha >= 1/16)."""
    x = np.sort(np.asarray(d, dtype=float))
    n = x.size
    if n == 0:
        return None
    if n <= EXACT_MAX_N:
        counts = np.zeros(n * (n + 1) // 2 + 1)
        counts[0] = 1.0
        for k in range(1, n + 1):  # subsets of the ranks 1..k by their sum
            counts[k:] = counts[k:] + counts[:-k].copy()
        cdf = np.cumsum(counts) / 2.0**n
        c = int(np.count_nonzero(cdf <= alpha / 2))
    else:
        mu, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        c = max(0, math.floor(mu + 0.5 - float(norm.isf(alpha / 2)) * sd))
    if c < 1:
        return None
    i, j = np.triu_indices(n)
    walsh = np.sort((x[i] + x[j]) / 2)
    return float(walsh[c - 1]), float(walsh[walsh.size - c])


def t_interval(d: Sequence[float], alpha: float) -> tuple[float, float] | None:
    """Two-sided (1 - alpha) Student-t interval for the mean of ``d``; None below 2 values."""
    x = np.asarray(d, dtype=float)
    if x.size < 2:
        return None
    half = float(student_t.ppf(1 - alpha / 2, x.size - 1)) * float(np.std(x, ddof=1)) / math.sqrt(x.size)
    centre = float(np.mean(x))
    return centre - half, centre + half


def _meet(a: tuple[float, float], b: tuple[float, float] | None) -> tuple[float, float]:
    """``a`` narrowed by ``b`` where they overlap (two valid intervals at split alphas); ``a`` when they do not."""
    if b is None or max(a[0], b[0]) > min(a[1], b[1]):
        return a
    return max(a[0], b[0]), min(a[1], b[1])


@dataclass
class ConfidenceSequence:
    """Always-valid (1 - alpha) confidence sequence for the centre of symmetry of a stream of log-ratios; closed at
    a stop that did not look at the values, its interval also uses the fixed-n signed-rank test (module doc)."""

    alpha: float
    final_share: float = FINAL_SHARE
    looks: tuple[int, ...] = ()  # few pairs: t intervals at these pair counts (module doc), instead of signed-rank
    look: tuple[float, float] | None = None  # the looks' interval so far
    grid: np.ndarray = field(default_factory=lambda: np.arange(-GRID_HALF_WIDTH, GRID_HALF_WIDTH + GRID_STEP / 2,
                                                                 GRID_STEP))
    data: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0 <= self.final_share < 1:
            raise ValueError(f"final_share must be in [0, 1), got {self.final_share}")
        self._threshold = math.log(1 / (self.alpha * (1 - self.final_share)))
        # log wealth, its running maximum (a shift rejected once stays rejected), the sums of past g and of g^2
        self.log_wealth, self.max_log_wealth, self._s1, self._s2 = np.zeros((4, self.grid.size))
        self.closed = False

    def close(self) -> None:
        """The run has stopped for a reason that did not look at the values (budget, pair cap): from now on the
        interval also uses the fixed-n signed-rank test at ``final_share * alpha``. No more values after this."""
        self.closed = True

    def update(self, d: float) -> None:
        if not math.isfinite(d):
            raise ValueError(f"log-ratio must be finite, got {d}")
        if self.closed:
            raise ValueError("the sequence is closed (its fixed-n test has been spent); start a new one")
        n = len(self.data)
        scale = SCALE_PRIOR if n < 3 else max(SCALE_FLOOR, 2.0 * robust_sd(self.data))
        g = np.clip((d - self.grid) / scale, -1.0, 1.0)
        # aGRAPA-style predictable bet: mean / (variance + mean^2) of past g, with one pseudo-observation at 0
        mu = self._s1 / (n + 1)
        var = np.maximum(self._s2 / (n + 1) - mu**2, 0.0) + 1.0 / (n + 1)
        lam = np.clip(mu / (var + mu**2), -LAMBDA_MAX, LAMBDA_MAX)
        self.log_wealth += np.log1p(lam * g)
        np.maximum(self.max_log_wealth, self.log_wealth, out=self.max_log_wealth)
        self._s1 += g
        self._s2 += g * g
        self.data.append(float(d))
        if self.n in self.looks:
            got = t_interval(self.data, self.alpha * self.final_share / len(self.looks))
            self.look = got if self.look is None or got is None else _meet(self.look, got)

    @property
    def n(self) -> int:
        return len(self.data)

    def interval(self) -> tuple[float, float]:
        """Shifts not rejected so far (hull; before any data the whole grid; every shift rejected, data outside the
        grid: the nearest edge). Closed: intersected with the signed-rank interval (if the two do not overlap, the
        sequence's alone, which keeps its own share); with ``looks``, with the looks' t interval instead, open or
        closed."""
        ok = np.flatnonzero(self.max_log_wealth < self._threshold)
        if ok.size:
            lo, hi = float(self.grid[ok[0]]), float(self.grid[ok[-1]])
        else:
            lo = hi = float(self.grid[-1] if np.mean(self.data) > 0 else self.grid[0])
        if self.looks:
            return _meet((lo, hi), self.look)
        if not self.closed or self.final_share == 0:
            return lo, hi
        return _meet((lo, hi), signed_rank_interval(self.data, self.alpha * self.final_share))

    def estimate(self) -> float:
        return hodges_lehmann(self.data)


@dataclass(frozen=True)
class SeqDecision:
    kind: str  # regression | improvement | unchanged | open (inconclusive when the budget is spent)
    estimate: float  # Hodges-Lehmann, log scale
    low: float
    high: float
    n: int
    note: str = ""


def decide(cs: ConfidenceSequence, tau: float, eps: float) -> SeqDecision:
    """``tau``: regression threshold, ``eps``: equivalence margin, both log-scale (log1p of the relative value); open
    below 2 pairs."""
    lo, hi = cs.interval()
    est = cs.estimate() if cs.n else math.nan
    if cs.n < 2:
        return SeqDecision("open", est, lo, hi, cs.n)
    kind, note = "open", ""
    if lo > 0 and est > tau:
        kind = "regression"
    elif hi < 0 and est < -tau:
        kind = "improvement"
    elif -eps < lo and hi < eps:
        kind = "unchanged"
        if lo > 0 or hi < 0:
            note = f"significantly {'slower' if lo > 0 else 'faster'}, but by less than the threshold"
    return SeqDecision(kind, est, lo, hi, cs.n, note)


def mde_reached(cs: ConfidenceSequence, power: float = 0.8) -> float:
    """Smallest true slowdown (log scale) this many pairs detect with probability ``power``: the estimate must
    clear the interval's half-width (approximately, for an estimate with sd ~ robust sd / sqrt(n))."""
    if cs.n < 3:
        return math.inf
    lo, hi = cs.interval()
    half = (hi - lo) / 2
    return half + float(norm.ppf(power)) * robust_sd(cs.data) / math.sqrt(cs.n)


def pairs_to_settle(cs: ConfidenceSequence, tau: float, eps: float, cap: int = 100_000) -> int | None:
    """Projected total pairs after which the interval would be narrow enough to decide, if the estimate and the
    spread stayed as observed: half-widths of betting sequences shrink about like sqrt(log n / n)."""
    if cs.n < 3:
        return None
    lo, hi = cs.interval()
    half = (hi - lo) / 2
    est = cs.estimate()
    # narrowest half-width that would decide: clear 0 (regression/improvement beyond tau) or fit inside +-eps
    need = abs(est) if abs(est) > tau else eps - abs(est)
    if need <= 0 or half <= 0:
        return None
    n = n0 = cs.n
    while half * math.sqrt((n0 / n) * (math.log(n + math.e) / math.log(n0 + math.e))) >= need:
        n = math.ceil(n * 1.1) + 1
        if n > cap:
            return None
    return int(n)


def pairs_needed(sigma_pair: float, delta: float, alpha: float, tau: float, eps: float, *, power: float = 0.8,
                 trials: int = 30, cap: int = 600, seed: int = 0) -> int | None:
    """Pairs a budget must hold for an A/B to decide with probability ``power`` when the per-pair log-ratio has sd
    ``sigma_pair`` and the true shift is ``delta`` (all log scale): simulated with this module's own procedure on
    normal noise, the sequence looking every few pairs and, at the budget's pair count, closed (the fixed-n
    share). ``None`` if more than ``cap`` (then no budget in reach settles it)."""
    if not (sigma_pair > 0 and math.isfinite(sigma_pair)):
        return None
    rng = np.random.default_rng(seed)
    budgets = sorted({*range(3, 21), *(round(20 * 1.1**k) for k in range(60) if 20 * 1.1**k <= cap), cap})
    first = []  # per trial: the smallest budget (pair count) at which it is decided, early or once closed
    for _ in range(trials):
        cs = ConfidenceSequence(alpha)
        got = cap + 1
        for i in range(cap):
            cs.update(float(delta + rng.normal(0, sigma_pair)))
            done = (i < 20 or i % max(1, i // 20) == 0) and decide(cs, tau, eps).kind != "open"
            if not done and i + 1 in budgets:
                cs.closed = True  # what a budget of i + 1 pairs would end with; reopened to go on
                done = decide(cs, tau, eps).kind != "open"
                cs.closed = False
            if done:
                got = i + 1
                break
        first.append(got)
        if len(first) >= 6 and sum(f > cap for f in first) > (1 - power) * trials:
            return None  # too many trials past the cap already: the quantile is past it
    n = int(np.quantile(first, power, method="higher"))
    return None if n > cap else n
