from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.measure.ops.shapes import BOUNDS, SHAPE_CLASSES, canonical, llm_shapes

B = BOUNDS["small"]


@settings(max_examples=60, derandomize=True, deadline=None)
@given(data=st.data(), cls=st.sampled_from(SHAPE_CLASSES))
def test_class_invariants(data, cls):
    s = data.draw(llm_shapes(cls, "small"))
    assert s.shape_class == cls
    assert s.heads == s.kv_heads * s.ratio and s.head_dim in B.head_dims
    assert 1 <= s.batch <= B.max_batch and s.new >= 1 and s.past >= 0
    assert s.hidden <= B.max_hidden and s.vocab <= B.max_vocab and s.topk <= max(s.vocab, 1)
    if cls == "decode":
        assert s.new == 1 and s.past >= 1
    if cls == "prefill":
        assert s.past == 0 and s.new >= 2
    if cls == "odd":
        assert s.hidden % 2 == 1 and s.new % 2 == 1
    if cls == "unit":
        assert s.batch == s.new == s.heads == 1


def test_canonical_covers_every_class():
    can = canonical("small")
    assert set(can) == set(SHAPE_CLASSES)
    assert all(s.shape_class == c for c, ss in can.items() for s in ss)
    assert set(canonical("large")) == set(SHAPE_CLASSES)


def test_shape_dict_round_trip():
    s = canonical()["odd"][0]
    assert type(s).from_dict(s.as_dict()) == s


def test_a_result_with_an_infinite_error_round_trips_through_json():
    """A wrong output with inf/NaN where the reference is finite has max_ratio = inf, written "inf" (JSON has no
    infinity); read back it must be the float again, or the matrix's max() over results fails on a str."""
    import json

    from perfsuite.measure.ops.matrix import CellAgg
    from perfsuite.measure.ops.runner import OpResult

    r = OpResult("softmax", "torch", "float16", canonical()["odd"][0].as_dict(), 3, "wrong", "inf at 0",
                 max_ratio=float("inf"), max_abs_err=float("inf"))
    d = json.loads(json.dumps(r.as_dict()))
    assert d["max_ratio"] == "inf"
    back = OpResult.from_dict(d)
    assert back == r
    agg = CellAgg()
    agg.add(back)
    assert agg.max_ratio == float("inf")
