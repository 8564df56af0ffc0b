import argparse
import json
from pathlib import Path

import pytest

from perfsuite.adapters.cli import ops as cmd


def parse(argv):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    cmd.register(sub)
    return p.parse_args(["ops", *argv])


def test_sweep_writes_matrix_and_fails_on_new_gap(tmp_path, capsys):
    gaps = tmp_path / "gaps.toml"
    args = parse(["--backends", "torch,onnxruntime-cpu", "--ops", "int8_dynamic_matmul", "--dtypes", "float16",
                  "--classes", "unit", "--examples", "1", "--out", str(tmp_path), "--known-gaps", str(gaps),
                  "--runner-class", "cpu-test-2c", "--isolate", "none", "-q"])
    assert args.func is cmd.main
    assert cmd.main(args) == 1  # ORT CPU has no float16 DynamicQuantizeMatMul: a new gap
    data = json.loads((tmp_path / "ops-matrix.json").read_text())
    assert data["meta"]["runner_class"] == "cpu-test-2c"
    worst = {(c["backend"], c["dtype"]): c["worst"] for c in data["cells"]}
    assert worst[("onnxruntime-cpu", "float16")] == "unsupported" and worst[("torch", "float16")] == "pass"
    assert "| int8_dynamic_matmul | unit |" in (tmp_path / "ops-matrix.md").read_text()
    # record it as known: the same sweep is green
    args.write_known_gaps = True
    assert cmd.main(args) == 0 and gaps.exists()
    args.write_known_gaps = False
    assert cmd.main(args) == 0
    assert "0 new" in capsys.readouterr().out


def test_repro_reruns_one_cell(capsys):
    blob = {"op": "silu", "backend": "torch", "dtype": "float32", "seed": 5,
            "shape": {"shape_class": "unit", "batch": 1, "new": 1, "past": 0, "kv_heads": 1, "ratio": 1,
                      "head_dim": 32, "hidden": 8, "inter": 8, "vocab": 8, "group": 32, "topk": 1}}
    assert cmd.main(parse(["--repro", json.dumps(blob)])) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "pass"


def _cli(argv, capsys):
    from perfsuite import cli

    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_malformed_known_gaps_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "gaps.toml"
    bad.write_text("[[gap]\nop = 'x'\n")
    code, out, err = _cli(["ops", "--known-gaps", str(bad), "--ops", "silu", "--classes", "unit", "-q",
                           "--out", str(tmp_path)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"perfsuite ops: {bad}: not valid TOML") and "fix the file or delete it" in err
    assert not (tmp_path / "ops-matrix.json").exists()  # refused before the sweep


def test_project_known_gaps_file_malformed_is_exit_2(tmp_path, capsys, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[tool.perfsuite]\n")
    kg_dir = tmp_path / "baselines" / "known_gaps"
    kg_dir.mkdir(parents=True)
    (kg_dir / "all.toml").write_text("[[gap]]\nop = 'x'\nbackend = 'y'\nwhen = { os = 'linux' }\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(["ops", "--runner-class", "cpu-a-1c", "--ops", "silu", "--classes", "unit", "-q"], capsys)
    assert code == 2 and err.count("\n") == 1 and "when.os: unknown condition" in err


@pytest.mark.parametrize(("argv", "env", "needle"), [
    (["--profile", "nightlly"], {}, "--profile='nightlly': unknown hypothesis profile; use one of ci, nightly"),
    ([], {"PERFSUITE_HYPOTHESIS_PROFILE": "fast"}, "PERFSUITE_HYPOTHESIS_PROFILE='fast': unknown hypothesis profile"),
    (["--runner-class", "../../etc"], {}, "--runner-class '../../etc': a path, not a name"),
    ([], {"PERFSUITE_RUNNER_CLASS": "known_gaps"}, "PERFSUITE_RUNNER_CLASS 'known_gaps': a reserved name"),
    (["--ops", "silu,swish"], {}, "--ops: unknown op(s) swish; known: "),
    (["--classes", "huge"], {}, "--classes: unknown shape class(es) huge; use unit"),
    (["--examples", "0"], {}, "--examples 0: use a whole number >= 1"),
    (["--repro", "{x"], {}, "--repro: not JSON"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, monkeypatch, argv, env, needle):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, _, err = _cli(["ops", "--ops", "silu", "--classes", "unit", "-q", "--out", str(tmp_path), *argv], capsys)
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_isolated_cells_give_the_matrix_of_in_process_ones(tmp_path, capsys):
    """``--isolate all``: every cell in a worker process forked from the one pool's zygote; same cells, same
    statuses and seeds as in this process."""
    base = ["--backends", "torch,onnxruntime-cpu", "--ops", "silu,int8_dynamic_matmul", "--dtypes", "float32",
            "--classes", "unit", "--examples", "1", "--runner-class", "cpu-test-2c", "--known-gaps",
            str(tmp_path / "gaps.toml"), "-q"]
    cells = {}
    for how in ("none", "all"):
        args = parse([*base, "--isolate", how, "--out", str(tmp_path / how)])
        cmd.main(args)
        data = json.loads((tmp_path / how / "ops-matrix.json").read_text())
        cells[how] = sorted((c["op"], c["backend"], c["dtype"], c["worst"], json.dumps(c["repro"], sort_keys=True))
                            for c in data["cells"])
    capsys.readouterr()
    assert cells["all"] == cells["none"] and len(cells["all"]) == 4


def test_uncharacterised_class_reports_and_passes(tmp_path, capsys, monkeypatch):
    """A feature set no known-gaps file characterises (here: no file at all): its gaps are listed, not failed."""
    (tmp_path / "pyproject.toml").write_text("[tool.perfsuite]\n")
    monkeypatch.chdir(tmp_path)
    argv = ["ops", "--backends", "onnxruntime-cpu", "--ops", "int8_dynamic_matmul", "--dtypes", "float16",
            "--classes", "unit", "--examples", "1", "--isolate", "none", "-q", "--out", str(tmp_path / "out")]
    code, out, _ = _cli([*argv, "--runner-class", "rocm-gfx942-test"], capsys)
    assert code == 0 and "not yet characterised on " in out and "1 non-pass cell(s) that no known gap matches" in out
    assert "NOT CHARACTERISED int8_dynamic_matmul/unit/onnxruntime-cpu/float16: unsupported" in out
    data = json.loads((tmp_path / "out" / "ops-matrix.json").read_text())
    assert len(data["gaps"]["uncharacterised"]) == 1 and data["meta"]["characterised"] is False
    # the same gap where a family file characterises every feature set (an empty condition) fails as new
    (tmp_path / "baselines" / "known_gaps").mkdir(parents=True)
    (tmp_path / "baselines" / "known_gaps" / "cpu.toml").write_text("characterised_on = {}\n")
    code, out, _ = _cli([*argv, "--runner-class", "cpu-x-2c"], capsys)
    assert code == 1 and "NEW int8_dynamic_matmul/unit/onnxruntime-cpu/float16" in out


# ---- feature sets no known-gaps file characterises: reported, failed only by --strict -----------------------------
SKYLAKE = ("fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl")  # no VNNI
EPYC_AVX2 = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma"


@pytest.mark.parametrize(("flags", "strict", "code", "needle"), [
    (SKYLAKE, False, 0, "not yet characterised on x86_64/avx512 (cpu flags injected"),
    (SKYLAKE, True, 1, "FAILED (--strict)"),
    (EPYC_AVX2, False, 1, "NEW int8_dynamic_matmul/unit/onnxruntime-cpu/float16: unsupported"),  # characterised
])
def test_uncharacterised_feature_set_reports_and_strict_fails(tmp_path, monkeypatch, capsys, flags, strict, code,
                                                              needle):
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the injected flags are x86 flags; the tier ladder follows this machine's architecture")
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "pyproject.toml").write_text('[tool.perfsuite]\nbaselines_dir = "baselines"\n')
    kg = tmp_path / "baselines" / "known_gaps"
    kg.mkdir(parents=True)
    (kg / "cpu.toml").write_text((root / "baselines" / "known_gaps" / "cpu.toml").read_text())  # no all.toml
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PERFSUITE_CPU_FLAGS", flags)
    argv = ["--backends", "onnxruntime-cpu", "--ops", "int8_dynamic_matmul", "--dtypes", "float16", "--classes",
            "unit", "--examples", "1", "--out", str(tmp_path / "out"), "--runner-class", "cpu-test-2c",
            "--isolate", "none", "-q"] + (["--strict"] if strict else [])
    assert cmd.main(parse(argv)) == code
    out = capsys.readouterr().out
    assert needle in out
    md = (tmp_path / "out" / "ops-matrix.md").read_text()
    data = json.loads((tmp_path / "out" / "ops-matrix.json").read_text())
    assert data["meta"]["features"].startswith("x86_64/" + ("avx512" if flags == SKYLAKE else "avx2"))
    if flags == SKYLAKE:
        assert "NOT CHARACTERISED int8_dynamic_matmul/unit/onnxruntime-cpu/float16: unsupported" in out
        assert "## Not yet characterised on x86_64/avx512" in md and len(data["gaps"]["uncharacterised"]) == 1
    else:
        assert data["gaps"]["new"] and not data["gaps"]["uncharacterised"]
