"""Tolerance rule: how far a backend's output may sit from the float64 reference (docs/ops.md, "Tolerance").

Per element ``tol = C * eps(dtype) * (sqrt(K) * mag + |ref|) + floor(dtype)``: error analysis bounds a length-``K``
dot product by ``~K * eps * (|a| . |b|)``; blocked/pairwise/fp32-accumulating kernels behave like ``sqrt(K) * eps``
in practice, which is what we use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EPS = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
FLOOR = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 1e-2}
DEFAULT_C = 8.0


@dataclass(frozen=True)
class ToleranceCheck:
    ok: bool
    max_abs_err: float
    max_ratio: float  # max |err| / tol (> 1 means out of tolerance); the hypothesis target
    nan_where_finite: int  # elements NaN/Inf in the output where the reference is finite
    bad_elements: int
    numel: int
    worst_index: tuple[int, ...] | None = None


def tolerance(dtype: str, ref: np.ndarray, mag: np.ndarray | float | None = None, k: int = 1,
              c: float = DEFAULT_C) -> np.ndarray:
    """Per-element tolerance for ``ref`` (float64) computed in ``dtype`` with reduction length ``k``."""
    eps = EPS[dtype]
    ref_abs = np.abs(ref)
    m = ref_abs if mag is None else np.broadcast_to(np.asarray(mag, dtype=np.float64), ref.shape)
    return c * eps * (math.sqrt(max(k, 1)) * m + ref_abs) + FLOOR[dtype]


def compare(out: np.ndarray, ref: np.ndarray, tol: np.ndarray) -> ToleranceCheck:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        return ToleranceCheck(False, math.inf, math.inf, 0, int(ref.size), int(ref.size))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        finite_ref = np.isfinite(ref)
        bad_nan = finite_ref & ~np.isfinite(out)
        # Non-finite reference entries (e.g. -inf logits) must be matched exactly.
        mismatch_nonfinite = ~finite_ref & ~((out == ref) | (np.isnan(out) & np.isnan(ref)))
        err = np.where(finite_ref & np.isfinite(out), np.abs(out - ref), 0.0)
        ratio = np.where(finite_ref, err / np.maximum(tol, 1e-300), 0.0)
        ratio = np.where(bad_nan | mismatch_nonfinite, np.inf, ratio)
        n_bad = int((ratio > 1.0).sum())
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape)) if ratio.size else None
        return ToleranceCheck(ok=n_bad == 0, max_abs_err=float(err.max()) if err.size else 0.0,
                              max_ratio=float(ratio.max()) if ratio.size else 0.0,
                              nan_where_finite=int(bad_nan.sum()), bad_elements=n_bad, numel=int(ref.size),
                              worst_index=worst)
