"""Change points in a history series: E-divisive means with a permutation test (Matteson & James, 2014). docs/history.md
gives the method: the energy statistic Q of a split, the permutation test (seeded from the data, stopped once it cannot
reach ``max_pvalue``), the recursion, positive series on the log scale. Choices beyond it:

* Like MongoDB's signal-processing-algorithms and Hunter/Apache Otava, the right end of Y is the end of the
  segment (M&J also search that end; with recursion on the parts the extra search buys little and costs O(n^3)).
  Every split is O(n^2) from one distance matrix with prefix sums.
* ``min_size`` points on each side (default 3): a change needs 3 nightlies after it to be flagged, and a
  single odd night can never be a segment of its own.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_MAX_PVALUE = 0.01
DEFAULT_PERMUTATIONS = 199
DEFAULT_MIN_SIZE = 3


class SeriesTooShort(ValueError):
    """Fewer points than a detection needs; the message says how many."""


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first point of the new segment: the change happened between index - 1 and index
    p_value: float
    q: float  # the energy statistic of the accepted split
    before: float  # median of the segment before (original scale)
    after: float  # median of the segment after

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else math.inf

    @property
    def change(self) -> float:
        """Relative change, e.g. +0.05 for 5 % more (slower, for a latency)."""
        return self.ratio - 1.0


def needed_points(min_size: int = DEFAULT_MIN_SIZE) -> int:
    return 2 * min_size


def _best_split(z: np.ndarray, min_size: int, a: float) -> tuple[int, float]:
    """(tau, Q) of the best split of one segment: X = z[:tau], Y = z[tau:]. Q = -inf if none is allowed."""
    n = z.size
    if n < 2 * min_size:
        return -1, -math.inf
    d = np.abs(z[:, None] - z[None, :]) ** a
    lower = np.tril(d, -1).sum(axis=1)  # sum_{j<i} d[i, j]
    rows = d.sum(axis=1)
    xx = 2.0 * np.concatenate(([0.0], np.cumsum(lower)))  # ordered-pair sum inside z[:tau], tau = 0..n
    xy = np.concatenate(([0.0], np.cumsum(rows))) - xx  # sum over z[:tau] x z[tau:]
    yy = xx[-1] - xx - 2.0 * xy
    tau = np.arange(min_size, n - min_size + 1)
    m, k = tau.astype(float), (n - tau).astype(float)
    e = 2.0 * xy[tau] / (m * k) - xx[tau] / (m * (m - 1)) - yy[tau] / (k * (k - 1))
    q = m * k / (m + k) * e
    i = int(np.argmax(q))
    return int(tau[i]), float(q[i])


def _seed(z: np.ndarray) -> int:
    return int.from_bytes(hashlib.sha256(np.ascontiguousarray(z, dtype=float).tobytes()).digest()[:8], "little")


def e_divisive(values: Sequence[float], *, max_pvalue: float = DEFAULT_MAX_PVALUE,
               permutations: int = DEFAULT_PERMUTATIONS, min_size: int = DEFAULT_MIN_SIZE, a: float = 1.0
               ) -> list[ChangePoint]:
    """Significant change points of ``values`` (in time order), sorted by index. Raises :class:`SeriesTooShort`
    below ``2 * min_size`` points."""
    if min_size < 2:
        raise ValueError("min_size must be >= 2 (a segment's inner distances need a pair)")
    if not 0 < a < 2:
        raise ValueError("a must be in (0, 2) (the energy distance characterises distributions only there)")
    if not 0 < max_pvalue < 1 or permutations < 1:
        raise ValueError("max_pvalue must be in (0, 1) and permutations >= 1")
    raw = np.asarray(values, dtype=float)
    if raw.ndim != 1 or not np.all(np.isfinite(raw)):
        raise ValueError("values must be a 1-D sequence of finite numbers")
    if raw.size < needed_points(min_size):
        raise SeriesTooShort(f"{raw.size} point(s); change-point detection needs at least {needed_points(min_size)} "
                             f"({min_size} on each side of a change)")
    z = np.log(raw) if np.all(raw > 0) else raw
    rng = np.random.default_rng(_seed(z))
    # Stop a test once this many permutations reach the observed Q: its p-value can no longer be <= max_pvalue.
    give_up = math.floor(max_pvalue * (permutations + 1))
    found: dict[int, tuple[float, float]] = {}  # index -> (p-value, Q)
    while True:
        segs = list(itertools.pairwise([0, *sorted(found), z.size]))
        best = [_best_split(z[s:e], min_size, a) for s, e in segs]
        j = max(range(len(segs)), key=lambda i: best[i][1])
        tau, q = best[j]
        if tau < 0 or not q > 0:
            break
        hits = done = 0
        while done < permutations and hits <= give_up:
            done += 1
            hits += int(max(_best_split(rng.permutation(z[s:e]), min_size, a)[1] for s, e in segs) >= q)
        if (1 + hits) / (1 + done) > max_pvalue:
            break
        found[segs[j][0] + tau] = ((1 + hits) / (1 + done), q)
    # Each change against its final neighbouring segments (a later split may have narrowed them).
    edges = [0, *sorted(found), raw.size]
    return [ChangePoint(idx, *found[idx], float(np.median(raw[edges[i]:idx])), float(np.median(raw[idx:edges[i + 2]])))
            for i, idx in enumerate(edges[1:-1])]
