import json

import pytest

from perfsuite import models


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
