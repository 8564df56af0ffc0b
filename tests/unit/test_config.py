from pathlib import Path

import pytest

from perfsuite.facts import config as cfg
from perfsuite.facts.cells import Cell, Scenario


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
        ({"roofline": "no"}, "[tool.perfsuite] roofline"),
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


def _resolve(conf, **kw):
    args = {"profile": "smoke", "device": "cpu", "backends": None, "models": None, "runner_class": "rc",
            "update_baselines": False, **kw}
    return cfg.resolve(conf, **args)


@pytest.mark.parametrize("rc", ["../../etc", "/etc", "known_gaps", "Cpu-X"])
def test_runner_class_override_is_validated_in_resolve(rc):
    with pytest.raises(cfg.ConfigError) as exc:
        _resolve(parse({}), runner_class=rc, update_baselines=True)
    msg = str(exc.value)
    assert f"{rc!r}" in msg and "PERFSUITE_RUNNER_CLASS" in msg
    assert "lowercase letters" in msg or "a reserved name" in msg


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"torch": {"compile_mode": "max-autotune"}},
         "[tool.perfsuite.backend_options.torch] compile_mode: unknown option for torch; allowed: none"),
        ({"torch-compile": {"compile_mode": "fastest"}},
         'compile_mode = "fastest": must be one of "default", "lite", "reduce-overhead"'),
        ({"vllm": {"enforce_eagr": True}},
         "[tool.perfsuite.backend_options.vllm] enforce_eagr: unknown option for vllm; allowed: async_scheduling"),
        ({"vllm": {"enforce_eager": "yes"}}, 'enforce_eager = "yes": must be true or false'),
        ({"vllm": {"kv_cache_space_gib": 0}}, "kv_cache_space_gib = 0: must be >= 1"),
        ({"onnxruntime-cpu": {"io_bindng": True}}, "io_bindng: unknown option for onnxruntime-cpu; allowed: "),
        ({"onnxruntime-cpu": {"int8": True}}, "int8: unknown option for onnxruntime-cpu"),  # a MIGraphX option
        ({"onnxruntime-cpu": {"graph_optimization_level": "max"}},
         'graph_optimization_level = "max": must be one of "disable", "basic", "extended", "all"'),
        ({"onnxruntime-cpu": {"strict": True}}, "strict = true: must be one of false"),
        ({"onnxruntime-migraphx": {"offload_copy": True}}, "offload_copy = true: must be one of false"),
        ({"vllm": []}, "[tool.perfsuite.backend_options] vllm must be a table of options"),
    ],
)
def test_backend_options_are_validated_at_configure_time(options, needle):
    with pytest.raises(cfg.ConfigError) as exc:
        parse({"backend_options": options})
    assert needle in str(exc.value)


def test_valid_backend_options_reach_the_cells():
    conf = parse({"backend_options": {"onnxruntime-cpu": {"io_binding": True, "graph_optimization_level": "BASIC"},
                                      "vllm": {"kv_cache_space_gib": 2, "enforce_eager": False}}})
    s = _resolve(conf, backends="onnxruntime-cpu,vllm")
    ort, vllm = s.cells()
    assert ort.option("io_binding") is True and vllm.option("kv_cache_space_gib") == 2
    assert ort.options_hash != ort.__class__(**{**ort.__dict__, "options": ()}).options_hash


def test_preflight_table():
    assert parse({}).preflight.max_other_cores == 0.25
    conf = parse({"preflight": {"max_other_cores": 0.5, "load_sample_s": 1, "on_busy": "mark"}})
    assert (conf.preflight.max_other_cores, conf.preflight.interval_s, conf.preflight.on_busy) == (0.5, 1.0, "mark")
    with pytest.raises(cfg.ConfigError, match=r"\[tool.perfsuite.preflight\] on_busy: 'ignore' is not one of"):
        parse({"preflight": {"on_busy": "ignore"}})
    with pytest.raises(cfg.ConfigError, match=r"max_other_cores must be a number from 0 to 1024, got -1"):
        parse({"preflight": {"max_other_cores": -1}})


def _scenario(prompt, new=32):
    return {"scenarios": {"big": {"batch_size": 1, "prompt_tokens": prompt, "new_tokens": new}},
            "profiles": {"smoke": {"models": ["tiny-llama", "tiny-opt"], "scenarios": ["short", "big"]}}}


@pytest.mark.parametrize("prompt", [2100, 100_000])
def test_a_scenario_past_every_models_context_is_a_usage_error(prompt):
    conf = parse({"scenarios": {"big": {"batch_size": 1, "prompt_tokens": prompt, "new_tokens": 32}},
                  "profiles": {"smoke": {"scenarios": ["big"]}}})
    with pytest.raises(cfg.ConfigError) as exc:
        _resolve(conf, models="tiny-opt")
    msg = str(exc.value)
    assert "scenario 'big'" in msg and "model 'tiny-opt'" in msg and "its context of 2048 tokens" in msg
    assert f"= {prompt + 32} >" in msg and "max_position_embeddings" in msg and "shorten the scenario" in msg


def test_cells_past_the_context_are_listed_for_skipping():
    s = _resolve(parse(_scenario(2017)))  # 2017 + 32 = 2049 > 2048
    assert sorted(s.unfit) == ["torch-tiny-llama-float32-b1-p2017-n32", "torch-tiny-opt-float32-b1-p2017-n32"]
    assert len(s.cells()) == 4
    assert _resolve(parse(_scenario(2016))).unfit == {}  # exactly the context: fits


def test_nightly_profile_skips_what_does_not_fit():
    root = Path(__file__).resolve().parents[2]
    s = _resolve(cfg.load(root / "pyproject.toml", root), profile="nightly")
    # scenario long = 2048 + 128 tokens: past tiny-llama's and opt-1.3b's 2048, within Llama-2's 4096
    assert any(i.startswith("torch-tiny-llama-float16-b1-p2048-n128") for i in s.unfit)
    assert any(i.startswith("torch-opt-1.3b-float16-b1-p2048-n128") for i in s.unfit)
    assert not any("llama2-7b" in i for i in s.unfit)


def test_the_run_start_roofline_is_on_unless_turned_off():
    assert parse({}).roofline is True and parse({"roofline": False}).roofline is False
