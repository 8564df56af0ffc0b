from pathlib import Path

import pytest

from perfsuite import config as cfg
from perfsuite.cells import Cell, Scenario


def parse(raw):
    return cfg.parse(raw, Path("/repo"))


def test_defaults_give_a_torch_tiny_llama_matrix():
    conf = parse({})
    s = cfg.resolve(conf, profile="smoke", device="cpu", backends=None, models=None, runner_class="rc",
                    update_baselines=False)
    assert [c.id for c in s.cells()] == ["torch-tiny-llama-float32-b1-p64-n32"]
    assert conf.baselines_dir == Path("/repo/baselines")


def test_matrix_expands_every_dimension_and_ids_read_as_the_cell():
    conf = parse({"scenarios": {"b4": {"batch_size": 4, "prompt_tokens": 128, "new_tokens": 16}},
                  "profiles": {"pr": {"backends": ["torch", "onnxruntime-cpu"], "models": ["tiny-llama", "tiny-opt"],
                                      "dtypes": ["float32", "bfloat16"], "scenarios": ["short", "b4"],
                                      "quantizations": ["none", "int8-dynamic"]}}})
    s = cfg.resolve(conf, profile="pr", device="cpu", backends=None, models=None, runner_class="rc",
                    update_baselines=False)
    ids = [c.id for c in s.cells()]
    assert len(ids) == len(set(ids)) == 2 * 2 * 2 * 2 * 2
    assert "onnxruntime-cpu-tiny-opt-bfloat16-b4-p128-n16-int8-dynamic" in ids


def test_cli_backend_and_model_override_the_profile():
    s = cfg.resolve(parse({}), profile="smoke", device="cpu", backends="vllm, torch", models="tiny-opt",
                    runner_class="rc", update_baselines=False)
    assert [c.id for c in s.cells()] == ["vllm-tiny-opt-float32-b1-p64-n32", "torch-tiny-opt-float32-b1-p64-n32"]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"baseline_dir": "x"}, "[tool.perfsuite] baseline_dir: unknown key; allowed: backend_options, baselines_dir"),
        ({"profiles": {"weekly": {}}}, "[tool.perfsuite.profiles] weekly: unknown key; allowed: nightly, pr, smoke"),
        ({"profiles": {"smoke": {"backends": ["tensorrt"]}}}, "'tensorrt' is not one of torch, torch-compile"),
        ({"profiles": {"smoke": {"dtypes": ["fp8"]}}}, "dtypes: 'fp8' is not one of float32, bfloat16, float16"),
        ({"profiles": {"smoke": {"generations": 0}}}, "generations must be an integer >= 1, got 0"),
        ({"profiles": {"smoke": {"scenarios": ["huge"]}}}, "'huge' is not one of short"),
        ({"scenarios": {"x": {"batch_size": 1, "prompt_tokens": 8}}}, "new_tokens: missing"),
        ({"scenarios": {"x": {"batch_size": 1, "prompt_tokens": 8, "new_tokens": 1}}},
         "new_tokens must be an integer >= 2"),
        ({"backend_options": {"onnxruntime": {}}}, "[tool.perfsuite.backend_options] onnxruntime: unknown key"),
    ],
)
def test_invalid_config_names_key_and_allowed_values(raw, needle):
    with pytest.raises(cfg.ConfigError) as exc:
        parse(raw)
    assert needle in str(exc.value)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"profile": "weekly"}, "--perf-profile 'weekly': unknown profile; use one of smoke, pr, nightly"),
        ({"device": "rocm"}, "--perf-device 'rocm': use one of cpu, cuda (a ROCm GPU is 'cuda')"),
        ({"backends": "tensorrt"}, "--perf-backend 'tensorrt': unknown backend"),
        ({"models": "gpt-5"}, "--perf-model 'gpt-5': unknown model; use llama2-7b"),
    ],
)
def test_invalid_options_are_clear(kw, needle):
    args = {"profile": "smoke", "device": "cpu", "backends": None, "models": None, "runner_class": "rc",
            "update_baselines": False, **kw}
    with pytest.raises(cfg.ConfigError, match=None) as exc:
        cfg.resolve(parse({}), **args)
    assert needle in str(exc.value)


def test_malformed_toml_is_a_config_error(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text("[tool.perfsuite\nx=1\n")
    with pytest.raises(cfg.ConfigError, match="malformed TOML"):
        cfg.load(p, tmp_path)


def test_precedence_cli_env_ini_default(monkeypatch):
    monkeypatch.delenv("PERFSUITE_PROFILE", raising=False)
    assert cfg.pick(None, "PERFSUITE_PROFILE", None, "smoke") == "smoke"
    assert cfg.pick(None, "PERFSUITE_PROFILE", "pr", "smoke") == "pr"
    monkeypatch.setenv("PERFSUITE_PROFILE", "nightly")
    assert cfg.pick(None, "PERFSUITE_PROFILE", "pr", "smoke") == "nightly"
    assert cfg.pick("smoke", "PERFSUITE_PROFILE", "pr", "nightly") == "smoke"


def test_cell_id_carries_only_non_default_dimensions():
    sc = Scenario("s", 2, 16, 8)
    assert Cell("vllm", "tiny-llama", "bfloat16", sc).id == "vllm-tiny-llama-bfloat16-b2-p16-n8"
    assert Cell("vllm", "/ckpt/My_Model/", "float16", sc, quantization="awq", tensor_parallel_size=2).id == \
        "vllm-my-model-float16-b2-p16-n8-awq-tp2"


def test_repo_pyproject_is_valid():
    root = Path(__file__).resolve().parents[2]
    conf = cfg.load(root / "pyproject.toml", root)
    for name in cfg.PROFILES:
        cfg.resolve(conf, profile=name, device="cpu", backends=None, models=None, runner_class="rc",
                    update_baselines=False).cells()
