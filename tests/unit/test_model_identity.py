"""A cell's model is known by what it is (config hash, weights fingerprint), not by its folder's name."""

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfsuite.facts import model_identity as mi
from perfsuite.facts import models
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.orchestrate.plan import measured_by
from perfsuite.verdict import report, values
from perfsuite.verdict.decide import decide
from perfsuite.verdict.estimate import estimate
from perfsuite.verdict.policy import parse_config

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(ROOT.glob("baselines/cpu-*/0*.json"))
PRE_IDENTITY = "cpu-intel-xeon-amx-2c-before-20261206"  # the 3aae1d5 series, recorded before model identities
OLD = [p for p in COMMITTED if p.parent.name == PRE_IDENTITY]
SC = Scenario("short", 1, 64, 32)


@pytest.fixture(scope="module")
def preset_dir(tmp_path_factory):
    return models.resolve("tiny-llama", tmp_path_factory.mktemp("cache")).path


def _local(preset_dir, where, **config_changes):
    """A checkpoint folder ``where`` with the preset's weights and its config changed as given."""
    where.mkdir(parents=True)
    shutil.copy(preset_dir / "model.safetensors", where / "model.safetensors")
    cfg = {**json.loads((preset_dir / "config.json").read_text()), **config_changes}
    (where / "config.json").write_text(json.dumps(cfg))
    return where


def _session(cache_dir, profile="smoke", generations=5, warmup=1):
    prof = SimpleNamespace(name=profile, generations=generations, warmup_generations=warmup)
    return SimpleNamespace(settings=SimpleNamespace(profile=prof, config=SimpleNamespace(cache_dir=cache_dir)))


def _bench(cell: Cell, cache_dir, workers=10):
    """A benchmark entry as this code would record it for ``cell`` (what the gate reads of it)."""
    return {"extra_info": {"cell": cell.as_dict(), "measured_by": measured_by(_session(cache_dir), cell, workers,
                                                                             "fork")}}


def test_a_local_dir_named_like_a_preset_gets_its_own_test_id():
    assert Cell("torch", "tiny-llama", "float32", SC).id == "torch-tiny-llama-float32-b1-p64-n32"
    assert Cell("torch", "./m/tiny-llama", "float32", SC).id == "torch-local-tiny-llama-float32-b1-p64-n32"
    assert Cell("torch", "/x/Tiny_Llama/", "float32", SC).id == "torch-local-tiny-llama-float32-b1-p64-n32"
    assert Cell("torch", "someorg/tiny-opt", "float32", SC).id == "torch-local-tiny-opt-float32-b1-p64-n32"
    assert Cell("torch", "./m/my-llama", "float32", SC).id == "torch-my-llama-float32-b1-p64-n32"


def test_a_relative_checkpoint_dir_reaches_the_workers_as_an_absolute_path(preset_dir, tmp_path, monkeypatch):
    """Workers run in the perfsuite tree, not the user's cwd: ``./m/tiny-llama`` failed there as unknown model."""
    from perfsuite.measure.worker.job import cell_from_dict, make_job

    local = _local(preset_dir, tmp_path / "m" / "tiny-llama")
    (tmp_path / "tiny-llama").mkdir()
    monkeypatch.chdir(tmp_path)
    job = make_job(Cell("torch", "./m/tiny-llama", "float32", SC), ["tpot"], generations=1, warmup=0, cache_dir=None)
    assert job["cell"]["model"] == str(local)
    assert cell_from_dict(job["cell"]).id == "torch-local-tiny-llama-float32-b1-p64-n32"
    assert make_job(Cell("torch", "tiny-llama", "float32", SC), ["tpot"], generations=1, warmup=0,
                    cache_dir=None)["cell"]["model"] == "tiny-llama"  # a preset, even with a ./tiny-llama here


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name[:4])
def test_the_preset_stays_comparable_with_the_committed_baselines(path):
    """The smoke matrix as this code records it (the project's own pyproject) is gated against every benchmark of
    every committed series: the 3aae1d5 one predates model identities, the 6abd188 one records them."""
    from perfsuite.facts import config as cfg

    settings = cfg.resolve(cfg.load(ROOT / "pyproject.toml", ROOT), profile="smoke", device="cpu", backends=None,
                           models=None, runner_class="cpu-test", update_baselines=False)
    session = SimpleNamespace(settings=settings)
    cells = {c.id: c for c in settings.cells()}
    run = json.loads(path.read_text())
    assert run["benchmarks"]
    for b in run["benchmarks"]:
        assert ("model" in b["extra_info"]["measured_by"]) == (path.parent.name != PRE_IDENTITY)
        cell = cells[b["extra_info"]["cell"]["id"]]
        current = {"extra_info": {"cell": cell.as_dict(),
                                  "measured_by": measured_by(session, cell, settings.workers_for(cell.backend),
                                                             "fork")}}
        assert current["extra_info"]["measured_by"]["model"]["source"] == "preset"
        assert values.mismatch(current, b) == [], b["name"]
    if path.parent.name != PRE_IDENTITY:
        return
    # a preset whose shape changed since (its parameter count is not the recorded one) is refused
    b = run["benchmarks"][0]
    changed = {"extra_info": {**b["extra_info"], "model_params": 4_000_001}}
    current = {"extra_info": {"measured_by": {**b["extra_info"]["measured_by"], "model": mi.of("tiny-llama")}}}
    assert values.mismatch(current, changed) == [
        f"model {mi.describe(mi.of('tiny-llama'))} vs tiny-llama (recorded without a model identity, 4.0 M params)"]


def test_a_local_tiny_llama_with_another_config_is_incomparable_naming_both(preset_dir, tmp_path):
    local = _local(preset_dir, tmp_path / "m" / "tiny-llama", num_hidden_layers=2)
    cur = _bench(Cell("torch", str(local), "float32", SC), tmp_path)
    ident = cur["extra_info"]["measured_by"]["model"]
    assert ident["source"] == "checkpoint" and ident["config"] != models.PRESETS["tiny-llama"].digest
    assert ident["params"] == 4_000_000  # the weights file is the preset's: counted from its header
    # against a baseline recorded with identities ...
    preset_run = _bench(Cell("torch", "tiny-llama", "float32", SC), tmp_path)
    (why,) = values.mismatch(cur, preset_run)
    digest = models.PRESETS["tiny-llama"].digest
    assert why == (f"model {local} (checkpoint, config {ident['config']}, weights {ident['weights']}, 4.0 M params)"
                   f" vs tiny-llama (preset, config {digest}, seeded weights, 4.0 M params)")
    # ... and against a committed one recorded before them (same test name: e.g. from before the local- prefix)
    committed = json.loads(OLD[0].read_text())["benchmarks"][0]
    (why,) = values.mismatch(cur, committed)
    assert f"model {local} (checkpoint, config {ident['config']}" in why
    assert why.endswith("vs tiny-llama (recorded without a model identity, 4.0 M params)")
    # the gate's verdict says so, with both
    pol = parse_config({}).policies_for("x", "test_tpot")[0]
    v = decide(estimate("test_tpot[x]", pol, [preset_run], [cur], parse_config({})), 0.01, 0.8)
    assert v.kind == "incomparable"
    text = report.describe(v)
    assert str(local) in text and f"tiny-llama (preset, config {digest}" in text


def test_same_folder_with_replaced_weights_is_incomparable(preset_dir, tmp_path):
    local = _local(preset_dir, tmp_path / "m" / "tiny-llama")
    cell = Cell("torch", str(local), "float32", SC)
    before = _bench(cell, tmp_path)
    assert values.mismatch(_bench(cell, tmp_path), before) == []  # same files: comparable
    w = local / "model.safetensors"
    st = w.stat()
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF  # one weight byte: same size, same header, same shapes
    w.write_bytes(bytes(data))
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime put back
    after = _bench(cell, tmp_path)
    old, new = before["extra_info"]["measured_by"]["model"], after["extra_info"]["measured_by"]["model"]
    assert old["config"] == new["config"] and old["weights"] != new["weights"]
    (why,) = values.mismatch(after, before)
    assert f"weights {new['weights']}" in why and f"weights {old['weights']}" in why
    # a checkpoint recorded before identities is never taken for this one
    legacy = {"extra_info": {**before["extra_info"], "measured_by": {
        k: v for k, v in before["extra_info"]["measured_by"].items() if k != "model"}}}
    assert values.mismatch(after, legacy) == [f"model {mi.describe(new)} vs {local} (recorded without a model "
                                              "identity)"]


def test_a_moved_checkpoint_is_the_same_model(preset_dir, tmp_path):
    a = _local(preset_dir, tmp_path / "a" / "ckpt")
    b = tmp_path / "b" / "ckpt"
    shutil.copytree(a, b)
    assert values.mismatch(_bench(Cell("torch", str(a), "float32", SC), tmp_path),
                           _bench(Cell("torch", str(b), "float32", SC), tmp_path)) == []


def test_weights_digest_is_cached_by_stat(preset_dir, tmp_path):
    w = _local(preset_dir, tmp_path / "ckpt") / "model.safetensors"
    real = mi.file_sha256(w, tmp_path)
    (entry,) = (tmp_path / "fingerprints").iterdir()
    cached = json.loads(entry.read_text())
    entry.write_text(json.dumps({**cached, "sha256": "from-the-cache"}))
    assert mi.file_sha256(w, tmp_path) == "from-the-cache"  # not read again while the stat is the same
    w.write_bytes(w.read_bytes())  # rewritten in place: ctime changes
    assert mi.file_sha256(w, tmp_path) == real
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)  # an unwritable cache: still a digest (root may write anyway)
    assert mi.file_sha256(w, tmp_path / "ro" / "sub") == real


def test_config_hash_ignores_who_wrote_the_file():
    cfg = {"model_type": "llama", "hidden_size": 256}
    assert mi.config_hash(cfg) == mi.config_hash({**cfg, "transformers_version": "9.9", "_name_or_path": "x"})
    assert mi.config_hash(cfg) != mi.config_hash({**cfg, "hidden_size": 512})


def test_an_unreadable_model_is_comparable_with_nothing(tmp_path):
    ident = mi.of(str(tmp_path / "gone"))
    assert ident["error"] and "identity unknown" in mi.describe(ident)
    a = {"extra_info": {"measured_by": {"model": ident}}}
    b = {"extra_info": {"measured_by": {"model": mi.of("tiny-llama")}}}
    assert values.mismatch(a, a) and values.mismatch(a, b) and values.mismatch(b, a)
