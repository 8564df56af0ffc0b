import numpy as np
import pytest
import torch

from perfsuite.measure.ops import registry
from perfsuite.measure.ops.shapes import Shape, canonical

S = Shape("odd", batch=2, new=3, past=5, kv_heads=2, ratio=2, head_dim=32, hidden=40, inter=24, vocab=17,
          group=32, topk=5)


@pytest.mark.parametrize("name", registry.public_ops())
def test_torch_float64_matches_reference(name):
    """The torch implementations, run in float64, reproduce the numpy reference (checks both)."""
    op = registry.get(name)
    if name in ("int8_dynamic_matmul",):  # quantizes activations by design
        pytest.skip("quantized activations")
    inputs = op.make_inputs(S, "float32", 0)
    ref = op.reference(inputs, S)
    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    out = op.torch(t, S)
    out = tuple(o.numpy() for o in out) if isinstance(out, tuple) else out.numpy()
    assert op.check(out, ref, "float32", inputs).ok


def test_attention_reference_masks_lower_right():
    op = registry.get("sdpa_kvcache")
    inputs = op.make_inputs(S, "float32", 1)
    out = op.reference(inputs, S).out
    # the first new token (position past) must not see keys after it: changing the last key leaves it unchanged
    inputs2 = dict(inputs, k=inputs["k"].copy(), v=inputs["v"].copy())
    inputs2["v"][:, :, -1] += 10
    out2 = op.reference(inputs2, S).out
    assert np.allclose(out[:, :, 0], out2[:, :, 0]) and not np.allclose(out[:, :, -1], out2[:, :, -1])


def test_matmulnbits_packing():
    rng = np.random.default_rng(0)
    k, n, g = 70, 3, 32  # K not a multiple of the block: padded
    q = rng.integers(0, 16, (k, n), dtype=np.uint8)
    z = rng.integers(0, 16, (3, n), dtype=np.uint8)
    s = rng.random((3, n))
    b, zp, sc = registry.pack_matmulnbits(q, z, s, g)
    assert b.shape == (n, 3, g // 2) and zp.shape == (n * 2,) and sc.shape == (n * 3,)
    assert b[1, 0, 0] == q[0, 1] | (q[1, 1] << 4)
    assert b[2, 2, 2] & 0xF == q[68, 2] and b[2, 2, 2] >> 4 == q[69, 2]
    assert zp[2 * 1 + 1] & 0xF == z[2, 1] and zp[2 * 1] >> 4 == z[1, 1]
    assert sc[1 * 3 + 2] == s[2, 1]


def test_bfloat16_rounding():
    x = np.array([1.0 + 2 ** -9])
    assert registry.round_to(x, "bfloat16")[0] == 1.0
    assert registry.round_to(x, "float32")[0] == x[0]


def test_canonical_shapes_have_references():
    """Every public op has a non-empty, finite float64 reference at every canonical shape."""
    for shapes in canonical().values():
        for s in shapes:
            for name in registry.public_ops():
                op = registry.get(name)
                ref = op.reference(op.make_inputs(s, "float16", 0), s)
                for out in ref.out if isinstance(ref.out, tuple) else (ref.out,):
                    assert out.dtype == np.float64 and out.size > 0, (name, s.describe())
                    assert np.isfinite(out).all(), (name, s.describe())
                assert ref.k >= 1
