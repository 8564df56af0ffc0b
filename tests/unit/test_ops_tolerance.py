import math

import numpy as np

from perfsuite.measure.ops.tolerance import EPS, compare, tolerance


def test_tolerance_scales_with_eps_and_sqrt_k():
    ref = np.zeros(4)
    t32 = tolerance("float32", ref, mag=1.0, k=64, c=8)
    t16 = tolerance("float16", ref, mag=1.0, k=64, c=8)
    assert np.allclose(t32 - 1e-6, 8 * EPS["float32"] * 8)
    assert (t16 > t32 * 1000).all()
    assert (tolerance("float32", ref, 1.0, k=256) > tolerance("float32", ref, 1.0, k=64)).all()


def test_nan_where_reference_finite_is_wrong():
    ref = np.ones(3)
    out = np.array([1.0, math.nan, 1.0])
    c = compare(out, ref, tolerance("float32", ref))
    assert not c.ok and c.nan_where_finite == 1 and c.max_ratio == math.inf


def test_non_finite_reference_must_match():
    ref = np.array([-np.inf, 0.0])
    assert compare(np.array([-np.inf, 0.0]), ref, np.full(2, 1e-6)).ok
    assert not compare(np.array([0.0, 0.0]), ref, np.full(2, 1e-6)).ok


def test_shape_mismatch_is_wrong():
    assert not compare(np.ones(3), np.ones(4), np.ones(4)).ok


def test_within_and_outside_tolerance():
    ref = np.array([1.0, 2.0])
    tol = np.array([0.1, 0.1])
    assert compare(ref + 0.05, ref, tol).ok
    c = compare(ref + np.array([0.0, 0.2]), ref, tol)
    assert not c.ok and c.bad_elements == 1 and c.worst_index == (1,) and abs(c.max_ratio - 2.0) < 1e-9
