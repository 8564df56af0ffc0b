import json

import pytest

from perfsuite.facts import models


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return cache, models.resolve("tiny-llama", cache)


def test_preset_materialises_once_with_marker(tiny):
    cache, m = tiny
    files = sorted(p.name for p in m.path.iterdir())
    assert "config.json" in files and "model.safetensors" in files and models.MARKER in files
    mtime = (m.path / "model.safetensors").stat().st_mtime_ns
    again = models.resolve("tiny-llama", cache)
    assert again.path == m.path and (m.path / "model.safetensors").stat().st_mtime_ns == mtime
    assert m.vocab_size == 2048 and m.digest == models.PRESETS["tiny-llama"].digest


def test_weights_are_seeded_and_identical_across_builds(tiny, tmp_path):
    _, m = tiny
    other = models.resolve("tiny-llama", tmp_path)
    assert (other.path / "model.safetensors").read_bytes() == (m.path / "model.safetensors").read_bytes()


def test_truncated_entry_is_rebuilt_not_loaded(tmp_path):
    m = models.resolve("tiny-llama", tmp_path)
    w = m.path / "model.safetensors"
    good = w.read_bytes()
    w.write_bytes(good[:100])
    assert models.resolve("tiny-llama", tmp_path).path == m.path
    assert w.read_bytes() == good
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".")]


def test_presets_have_distinct_digests_and_shape_faithful_sizes():
    digests = {p.digest for p in models.PRESETS.values()}
    assert len(digests) == len(models.PRESETS)
    l3 = models.PRESETS["llama3-8b"].config
    assert (l3["hidden_size"], l3["num_key_value_heads"], l3["vocab_size"]) == (4096, 8, 128256)


def test_checkpoint_dir_errors_name_the_fix(tmp_path):
    with pytest.raises(models.ModelError, match=r"no config\.json"):
        models.resolve(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(models.ModelError, match="only safetensors are loaded"):
        models.resolve(str(tmp_path))


def test_hub_id_only_from_local_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelError, match=r"not in the local Hugging Face cache and perfsuite never downloads"):
        models.resolve("someorg/some-model")
    with pytest.raises(models.ModelError, match="unknown model 'gpt5'"):
        models.resolve("gpt5")


def test_prompts_are_seeded_and_in_range():
    a = models.prompts(3, 7, 100, seed=1)
    assert a == models.prompts(3, 7, 100, seed=1) != models.prompts(3, 7, 100, seed=2)
    assert all(len(p) == 7 and all(4 <= t < 100 for t in p) for p in a)


# ---- custom code (auto_map) is refused before anything loads -----------------------------------------------------
# auto_map blocks as published: microsoft/Phi-3-mini-4k-instruct's config.json (model_type "phi3", a type
# transformers ships, so transformers would silently load its stock Phi3ForCausalLM instead) and
# THUDM/chatglm3-6b's (model_type "chatglm", unknown to transformers: needs the repo's modelling code).
PHI3_AUTO_MAP = {"AutoConfig": "configuration_phi3.Phi3Config",
                 "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"}
CHATGLM3_AUTO_MAP = {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                     "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration",
                     "AutoModelForSeq2SeqLM": "modeling_chatglm.ChatGLMForConditionalGeneration"}


def _checkpoint_with(tiny, tmp_path, **changes):
    _, m = tiny
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes((m.path / "model.safetensors").read_bytes())
    config = {**json.loads((m.path / "config.json").read_text()), **changes}
    (ckpt / "config.json").write_text(json.dumps(config))
    return ckpt


@pytest.mark.parametrize(("model_type", "auto_map", "shown"), [
    ("llama", PHI3_AUTO_MAP, "AutoModelForCausalLM -> modeling_phi3.Phi3ForCausalLM"),
    ("chatglm", CHATGLM3_AUTO_MAP, "AutoModelForCausalLM -> modeling_chatglm.ChatGLMForConditionalGeneration"),
])
def test_custom_code_checkpoints_are_refused(tiny, tmp_path, model_type, auto_map, shown):
    ckpt = _checkpoint_with(tiny, tmp_path, model_type=model_type, auto_map=auto_map)
    for call in (models.resolve, models.model_config):
        with pytest.raises(models.ModelError) as exc:
            call(str(ckpt))
        msg = str(exc.value)
        assert str(ckpt) in msg and shown in msg and f"model_type {model_type!r}" in msg
        assert "trust_remote_code is off" in msg and "without auto_map" in msg and "\n" not in msg


@pytest.mark.parametrize("model_type", ["llama-next", None])
def test_an_architecture_transformers_does_not_ship_is_refused_before_measuring(tiny, tmp_path, model_type):
    """Issue 40: a checkpoint whose model_type the installed transformers does not know used to start measuring and
    fail in a worker with transformers' advice to upgrade. Now one line, at resolve time, names it and the fix."""
    ckpt = _checkpoint_with(tiny, tmp_path, model_type=model_type)
    if model_type is None:
        cfg = json.loads((ckpt / "config.json").read_text())
        del cfg["model_type"]
        (ckpt / "config.json").write_text(json.dumps(cfg))
    for call in (models.resolve, models.model_config):
        with pytest.raises(models.ModelError) as exc:
            call(str(ckpt))
        msg = str(exc.value)
        said = "has no model_type" if model_type is None else "has model_type 'llama-next', which transformers"
        assert str(ckpt) in msg and said in msg and "or a preset (" in msg and "\n" not in msg, msg


def test_stock_checkpoint_resolves(tiny, tmp_path):
    ckpt = _checkpoint_with(tiny, tmp_path)
    assert models.resolve(str(ckpt)).path == ckpt
    assert models.model_config(str(ckpt))["max_position_embeddings"] == 2048


# ---- prompt + new tokens against the model's context --------------------------------------------------------------
def _cell(model="tiny-llama", prompt=64, new=32, backend="torch", **options):
    from perfsuite.facts.cells import Cell, Scenario

    return Cell(backend, model, "float32", Scenario("big", 1, prompt, new), options=tuple(options.items()))


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-opt"])
def test_check_fits_names_model_limit_scenario_and_fix(model):
    assert models.check_fits(_cell(model)) is None
    assert models.check_fits(_cell(model, 2016, 32)) is None  # 2048: exactly the context
    why = models.check_fits(_cell(model, 2100, 32))
    assert why is not None
    assert f"model {model!r}" in why and "2100 + 32 = 2132 > its context of 2048 tokens (max_position_embeddings)" \
        in why and "scenario 'big' (b1-p2100-n32)" in why and "shorten the scenario" in why
    assert "100032 >" in (models.check_fits(_cell(model, 100_000, 32)) or "")


def test_vllm_max_model_len_counts():
    why = models.check_fits(_cell(backend="vllm", max_model_len=4096))
    assert why is not None and "backend option max_model_len = 4096 > its context of 2048" in why


def test_vllm_llm_max_model_len_counts_too():
    """vllm-llm passes max_model_len to the engine as vllm does: a length past the context is a skip before the
    engine starts, not vLLM's error after it."""
    why = models.check_fits(_cell(backend="vllm-llm", max_model_len=4096))
    assert why is not None and "backend option max_model_len = 4096 > its context of 2048" in why
    assert models.check_fits(_cell(backend="vllm-llm", max_model_len=1024)) is None


@pytest.mark.parametrize(("config", "limit"), [
    ({"max_position_embeddings": 4096}, ("max_position_embeddings", 4096)),
    ({"n_positions": 1024, "n_ctx": 1024}, ("n_positions", 1024)),  # GPT-2
    ({"seq_length": 8192}, ("seq_length", 8192)),  # ChatGLM2/3
    ({"text_config": {"max_position_embeddings": 131072}}, ("text_config.max_position_embeddings", 131072)),
    ({"vocab_size": 10}, None),
])
def test_context_limit_fields(config, limit):
    assert models.context_limit(config) == limit


def test_custom_code_is_a_usage_error_at_configure_time(tiny, tmp_path):
    from perfsuite.facts import config as cfg

    ckpt = _checkpoint_with(tiny, tmp_path, model_type="chatglm", auto_map=CHATGLM3_AUTO_MAP)
    with pytest.raises(cfg.ConfigError, match=r"needs its own modelling code"):
        cfg.resolve(cfg.parse({}, tmp_path), profile="smoke", device="cpu", backends=None, models=str(ckpt),
                    runner_class="rc", update_baselines=False)
