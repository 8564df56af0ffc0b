import argparse
import json

from perfsuite.commands import ops as cmd


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
