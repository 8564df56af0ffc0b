import pytest

from perfsuite.ops import known_gaps as kg

TOML = """
[[gap]]
op = "sdpa_kvcache"
backend = "onnxruntime-cpu"
dtype = "*"
shape_class = ["tile_edge", "odd"]
status = ["unsupported"]
reason = "GQA batch>1 with past"

[[gap]]
op = "int8_dynamic_matmul"
backend = "onnxruntime-cpu"
dtype = "float16"
status = "*"
reason = "no fp16 kernel"
"""


def cell(op, backend, dtype, cls, worst, n=3):
    return {"op": op, "backend": backend, "dtype": dtype, "shape_class": cls, "worst": worst, "n": n,
            "detail": "d", "repro": {"seed": 1}}


@pytest.fixture
def gaps(tmp_path):
    p = tmp_path / "cpu-x-2c.toml"
    p.write_text(TOML)
    return kg.load(p)


def test_known_new_fixed(gaps):
    cells = [cell("sdpa_kvcache", "onnxruntime-cpu", "float16", "odd", "unsupported"),  # known
             cell("sdpa_kvcache", "onnxruntime-cpu", "float16", "tile_edge", "wrong"),  # status not listed: new
             cell("sdpa_kvcache", "onnxruntime-cpu", "float16", "decode", "unsupported"),  # class not listed: new
             cell("int8_dynamic_matmul", "onnxruntime-cpu", "float16", "decode", "pass"),  # gap 2 fixed
             cell("linear", "torch", "float32", "decode", "pass")]
    r = kg.evaluate(cells, gaps)
    assert [(c["shape_class"], c["worst"]) for c in r.new] == [("tile_edge", "wrong"), ("decode", "unsupported")]
    assert len(r.known) == 1 and r.known[0]["reason"] == "GQA batch>1 with past"
    assert [f["reason"] for f in r.fixed] == ["no fp16 kernel"]


def test_unexercised_gap_is_not_fixed(gaps):
    r = kg.evaluate([cell("linear", "torch", "float32", "decode", "pass")], gaps)
    assert r.fixed == [] and r.new == []


def test_missing_file_means_no_gaps(tmp_path):
    assert kg.load(tmp_path / "nope.toml") == []


def test_bad_files_name_the_problem(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("[[gap]]\nop = 'a'\nbackend = 'b'\nwhatever = 1\n")
    with pytest.raises(kg.KnownGapsError, match="unknown key"):
        kg.load(p)
    p.write_text("[[gap\n")
    with pytest.raises(kg.KnownGapsError, match="not valid TOML"):
        kg.load(p)


def test_render_round_trips(tmp_path):
    cells = [cell("topk", "onnxruntime-cpu", "float16", "odd", "wrong"), cell("linear", "torch", "float32", "unit",
                                                                              "pass")]
    p = tmp_path / "rc.toml"
    p.write_text(kg.render("rc", cells))
    gaps = kg.load(p)
    assert len(gaps) == 1
    assert kg.evaluate(cells, gaps).new == []
