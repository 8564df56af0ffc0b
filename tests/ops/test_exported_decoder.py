"""The ONNX Runtime backend's exported decoder over drawn (batch, seq, past) shapes, against torch.

Catches an export specialised to its dummy shape. Needs the export (perfsuite/measure/backends/onnxruntime/export.py);
the first run builds and caches it (~tens of seconds on 2 cores), later runs load it.
"""

from __future__ import annotations

import pytest
from hypothesis import event, example, given, settings

from perfsuite.measure.ops.decoder_sweep import CANONICAL, decoder_cases

try:
    from perfsuite.measure.backends.onnxruntime import export as _export  # noqa: F401
    _MISSING = None
except ImportError as exc:  # the ORT backend not present in this checkout
    _MISSING = f"perfsuite.measure.backends.onnxruntime.export not importable: {exc}"


@pytest.fixture(scope="module")
def harness():
    if _MISSING:
        pytest.skip(_MISSING)
    pytest.importorskip("onnxruntime")
    from perfsuite.measure.ops.decoder_sweep import DecoderHarness

    return DecoderHarness("tiny-llama", "float32")


def _with_examples(fn):
    for c in CANONICAL:
        fn = example(case=c)(fn)
    return fn


@settings(max_examples=6)
@given(case=decoder_cases())
@_with_examples
def test_exported_decoder_shapes(harness, case):
    r = harness.check(case, seed=case.batch * 1000 + case.seq * 31 + case.past)
    event(f"{case.shape_class}: {r['status']}")
    assert r["status"] == "pass", f"exported decoder at batch={case.batch} seq={case.seq} past={case.past}: {r}"


def test_a_session_error_without_a_message_is_reported_not_raised(harness):
    """An execution provider may raise with an empty message: the case is "unsupported", named by the error's type
    (the first line of an empty message used to raise IndexError out of the sweep)."""

    class _Raises:
        def __init__(self, real):
            self.real = real

        def get_inputs(self):
            return self.real.get_inputs()

        def run(self, *args, **kwargs):
            raise RuntimeError("")

    real, harness.session = harness.session, _Raises(harness.session)
    try:
        r = harness.check(CANONICAL[0])
    finally:
        harness.session = real
    assert r["status"] == "unsupported" and r["detail"] == "RuntimeError: ", r
