"""End to end: a local checkpoint named like a preset, recorded, then its weights replaced in place."""

import json
import shutil

import pytest
from test_plugin import project, run  # noqa: F401  (tests/plugin is on sys.path: rootdir conftest, prepend mode)

from perfsuite.facts import models


@pytest.mark.slow
def test_local_checkpoint_named_like_a_preset_is_known_by_its_contents(project, tmp_path):  # noqa: F811
    p = project(n=3, g=2, w=2)
    with open(p.path / "pyproject.toml", "a") as f:  # this checks identities, not the busy-machine refusal
        f.write("\n[tool.perfsuite.preflight]\nmax_other_cores = 1024\nmax_steal_cores = 1024\n")
    local = p.path / "m" / "tiny-llama"
    local.mkdir(parents=True)
    preset = models.resolve("tiny-llama")
    for f in ("config.json", "model.safetensors"):
        shutil.copy(preset.path / f, local / f)
    res = run(p, "--perf-model", "./m/tiny-llama", "--perf-update-baselines", "--benchmark-json=first.json")
    res.assert_outcomes(passed=3)
    first = json.loads((p.path / "first.json").read_text())["benchmarks"]
    # its own test id: not the preset's, so never matched with the preset's baselines by name
    assert {b["param"] for b in first} == {"torch-local-tiny-llama-float32-b2-p16-n3"}
    old = first[0]["extra_info"]["measured_by"]["model"]
    assert old["source"] == "checkpoint" and old["name"] == "./m/tiny-llama"

    # The user replaces the weights (same shapes, other values) in the same folder.
    from safetensors.torch import load_file, save_file

    weights = load_file(local / "model.safetensors")
    save_file({k: v * 1.01 for k, v in weights.items()}, local / "model.safetensors", metadata={"format": "pt"})
    res = run(p, "--perf-model", "./m/tiny-llama", "--benchmark-compare", "--benchmark-json=second.json",
              "-W", "default::perfsuite.verdict.outcome.GateInconclusive")
    res.assert_outcomes(passed=3)
    new = json.loads((p.path / "second.json").read_text())["benchmarks"][0]["extra_info"]["measured_by"]["model"]
    assert new["config"] == old["config"] and new["weights"] != old["weights"]
    out = res.stdout.str()
    assert "incomparable" in out and "REGRESSION" not in out
    assert f"weights {new['weights']}" in out and f"weights {old['weights']}" in out, out
