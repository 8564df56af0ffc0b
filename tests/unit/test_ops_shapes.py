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
