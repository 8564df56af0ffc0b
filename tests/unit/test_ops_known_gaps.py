from pathlib import Path

import pytest

from perfsuite.measure.ops import known_gaps as kg

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


# ---- scoped files: all.toml + <family>.toml + <runner-class>.toml, entries conditioned on `when` ----------------
ENV_132 = kg.Environment({"onnxruntime": "1.32.0", "torch": "2.13.0+cpu"}, "x86_64", frozenset({"avx2"}))


def _files(d, **named):
    d.mkdir(exist_ok=True)
    for name, text in named.items():
        (d / f"{name}.toml").write_text(text)
    return d


CHARACTERISED_AVX2 = 'characterised_on = { cpu_tier = ["avx2", "amx"] }\n'


def test_family_fallback_and_own_file_add_up(tmp_path):
    d = _files(tmp_path / "kg", all=TOML, cpu=CHARACTERISED_AVX2, **{"cpu-intel-xeon-amx-2c": """
[[gap]]
op = "topk"
backend = "onnxruntime-cpu"
"""})
    mine = kg.for_runner("cpu-intel-xeon-amx-2c", d, ENV_132)
    assert [p.name for p in mine.files] == ["all.toml", "cpu.toml", "cpu-intel-xeon-amx-2c.toml"]
    assert mine.characterised and len(mine.gaps) == 3
    assert mine.characterised_by == ("cpu.toml", "cpu-intel-xeon-amx-2c.toml")
    foreign = kg.for_runner("cpu-amd-epyc-avx2-2c", d, ENV_132)  # a fresh machine of a characterised feature set
    assert foreign.characterised and [g.op for g in foreign.gaps] == [("sdpa_kvcache",), ("int8_dynamic_matmul",)]
    assert "(characterised on x86_64/avx2 by cpu.toml); known-gaps files: all.toml, cpu.toml" in foreign.describe()


@pytest.mark.parametrize(("cpu_toml", "own", "characterised", "needle"), [
    (CHARACTERISED_AVX2, None, True, "characterised on x86_64/avx2 by cpu.toml"),
    ('characterised_on = [{ cpu_tier = "amx" }, { cpu_arch = "aarch64" }]\n', None, False,
     "not yet characterised on x86_64/avx2: cpu.toml characterise(s) other feature sets"),
    ("", None, False, "not yet characterised on x86_64/avx2: no known-gaps file declares it"),  # old-style file
    ("", "", True, "characterised on x86_64/avx2 by cpu-x-avx2-2c.toml"),  # a class file names its machine
    ('characterised_on = { cpu_tier = "amx" }\n', 'characterised_on = { cpu_tier = "sve" }\n', False, "other"),
])
def test_characterised_on_decides_by_feature_set(tmp_path, cpu_toml, own, characterised, needle):
    files = {"cpu": cpu_toml} if own is None else {"cpu": cpu_toml, "cpu-x-avx2-2c": own}
    found = kg.for_runner("cpu-x-avx2-2c", _files(tmp_path / "kg", **files), ENV_132)
    assert found.characterised == characterised and needle in found.describe()


@pytest.mark.parametrize(("text", "needle"), [
    ('[[gap]]\nop = "x"\nbackend = "y"\nwhen = { os = "linux" }\n', "when.os: unknown condition; allowed: onnxruntime"),
    ('[[gap]]\nop = "x"\nbackend = "y"\nwhen = { onnxruntime = "1.20+" }\n', "not a version specifier"),
    ('[[gap]]\nop = "x"\nbackend = "y"\nwhen = ">=1.20"\n', "when must be a table"),
    ('gap = 3\n', "'gap' must be an array of tables"),
    ('[gaps]\nop = "x"\n', "unknown table or key 'gaps'"),
    ("characterised_on = 3\n", "characterised_on: must be a table or a list of tables"),
    ('characterised_on = { cpu_level = "avx2" }\n', "when.cpu_level: unknown condition"),
])
def test_malformed_files_name_file_entry_and_fix(tmp_path, text, needle):
    d = _files(tmp_path / "kg", all=text)
    with pytest.raises(kg.KnownGapsError) as exc:
        kg.for_runner("cpu-a-1c", d, ENV_132)
    assert needle in str(exc.value) and str(d / "all.toml") in str(exc.value)


def test_invalid_runner_class_is_a_known_gaps_error(tmp_path):
    with pytest.raises(kg.KnownGapsError, match="a path, not a name"):
        kg.for_runner("../x", tmp_path)


def test_render_leaves_out_what_shared_files_cover(tmp_path):
    d = _files(tmp_path / "kg", all=TOML)
    shared = kg.for_runner("cpu-a-1c", d, ENV_132).gaps
    cells = [cell("sdpa_kvcache", "onnxruntime-cpu", "float16", "odd", "unsupported"),
             cell("topk", "onnxruntime-cpu", "float16", "odd", "wrong")]
    text = kg.render("cpu-a-1c", cells, covered=shared)
    assert 'op = "topk"' in text and "sdpa_kvcache" not in text


def test_repo_files_parse_and_apply_here():
    root = Path(__file__).resolve().parents[2]
    here = kg.for_runner("cpu-amd-epyc-avx2-2c", root / kg.DEFAULT_DIR, ENV_132)
    assert here.characterised and {g.op for g in here.gaps} == {("sdpa_kvcache",), ("int8_dynamic_matmul",)}
    assert len(here.gaps) == 3  # the AVX2 int8 saturation applies to this environment (avx2, no VNNI)
    assert not list((root / kg.DEFAULT_DIR).glob("cpu-*.toml"))  # no gap is keyed by CPU model
