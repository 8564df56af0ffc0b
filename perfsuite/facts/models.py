"""Models by name: a preset (perfsuite.facts.presets) is materialised once into ``<cache>/models/<name>-<digest>/``
(``config.json`` + ``model.safetensors`` + ``perfsuite-model.json``), so every backend loads byte-identical weights;
or a local safetensors checkpoint directory, or a hub id found in the local cache only. Nothing touches the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.facts import cache_entry
from perfsuite.facts.cells import Cell
from perfsuite.facts.presets import PRESETS, Preset

MARKER = "perfsuite-model.json"
class ModelError(Exception):
    """A model name or path that cannot be resolved; the message names the fix."""


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    path: Path  # directory with config.json and *.safetensors
    preset: Preset | None  # None for checkpoints
    digest: str  # identifies the weights: preset hash, or a hash of the checkpoint's file names and sizes

    @property
    def vocab_size(self) -> int:
        return int(self.config()["vocab_size"])

    def config(self) -> dict[str, Any]:
        return dict(json.loads((self.path / "config.json").read_text()))


def default_cache_dir() -> Path:
    if env := os.environ.get("PERFSUITE_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfsuite"


def known_model(name: str) -> bool:
    return name in PRESETS or Path(name).expanduser().is_dir() or name.count("/") == 1


def describe_models() -> str:
    return ", ".join(sorted(PRESETS)) + ", a local checkpoint directory, or a hub id already in the local cache"


def resolve(name: str, cache_dir: Path | None = None, materialize: bool = True) -> ResolvedModel:
    """Map a model name to a directory of safetensors weights, building a preset if needed."""
    if name in PRESETS:
        preset = PRESETS[name]
        target = (cache_dir or default_cache_dir()) / "models" / f"{name}-{preset.digest}"
        if materialize and not is_complete(target, preset.digest):
            _materialize(preset, target)
        return ResolvedModel(name, target, preset, preset.digest)
    path = Path(name).expanduser()
    if not path.is_dir():
        if name.count("/") != 1 or name.startswith((".", "/")):
            raise ModelError(f"unknown model {name!r}: use one of {describe_models()}")
        path = _from_hub_cache(name)
    return ResolvedModel(name, path, None, checkpoint_digest(_check_checkpoint(path)))


def _check_checkpoint(path: Path) -> Path:
    if not (path / "config.json").is_file():
        raise ModelError(f"{path}: no config.json; a model directory needs config.json and *.safetensors")
    if not list(path.glob("*.safetensors")):
        raise ModelError(f"{path}: no *.safetensors weights (only safetensors are loaded; convert .bin checkpoints"
                         " with transformers' save_pretrained(safe_serialization=True))")
    config = _read_config(path)
    check_stock_code(config, path)
    check_known_architecture(config, path)
    return path


def check_known_architecture(config: dict[str, Any], where: Path | str) -> None:
    """Refuse, before anything is measured, a ``model_type`` the installed transformers does not ship (it would fail
    later inside a worker with transformers' own text, which advises upgrading)."""
    mt = config.get("model_type")
    try:
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError:  # no transformers here: the backend that needs it says so
        return
    if isinstance(mt, str) and mt in CONFIG_MAPPING_NAMES:
        return
    what = "has no model_type" if mt is None else f"has model_type {mt!r}, which transformers {transformers.__version__} does not ship"
    raise ModelError(f"{where}: config.json {what}; perfsuite loads the architectures transformers ships (custom code "
                     "stays off): use a checkpoint of a shipped model_type (llama, mistral, opt, ...) or a preset "
                     f"({', '.join(sorted(PRESETS))})")


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "config.json").read_text(encoding="utf8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path / 'config.json'}: unreadable ({exc}); restore the checkpoint's config.json") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path / 'config.json'}: not a JSON object; restore the checkpoint's config.json")
    return data


def check_stock_code(config: dict[str, Any], where: Path | str) -> None:
    """Refuse a checkpoint that needs its own modelling code (``auto_map``): trust_remote_code stays off.

    transformers would otherwise load a known ``model_type`` as the stock architecture (benchmarking a model that
    is not the checkpoint's) or fail deep inside ``from_pretrained`` for a custom one.
    """
    auto_map = config.get("auto_map")
    if not auto_map:
        return
    classes = ", ".join(f"{k} -> {v if isinstance(v, str) else '/'.join(map(str, v))}"
                        for k, v in auto_map.items()) if isinstance(auto_map, dict) else str(auto_map)
    raise ModelError(
        f"{where}: config.json has auto_map ({classes}): the checkpoint needs its own modelling code "
        f"(model_type {config.get('model_type')!r}), and perfsuite never runs custom code (trust_remote_code is "
        "off); use a checkpoint of an architecture transformers ships (one without auto_map), or a preset "
        f"({', '.join(sorted(PRESETS))})")


# Fields that bound a model's positions, in the order transformers' configs use them (OPT and Llama:
# max_position_embeddings; GPT-2: n_positions; some remote-code models: seq_length / max_sequence_length).
CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_limit(config: dict[str, Any]) -> tuple[str, int] | None:
    """(field, value) of the model's maximum sequence length, or None if its config names none."""
    for cfg in (config, config.get("text_config") or {}):
        if not isinstance(cfg, dict):
            continue
        for key in CONTEXT_FIELDS:
            v = cfg.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return (key if cfg is config else f"text_config.{key}"), v
    return None


def model_config(name: str, cache_dir: Path | None = None) -> dict[str, Any]:
    """A model's ``config.json`` as a dict, without transformers and without building a preset's weights.

    Validates on the way (config.json readable, safetensors present, no custom code): raises :class:`ModelError`.
    """
    if name in PRESETS:
        p = PRESETS[name]
        return {**p.config, "architectures": [p.architecture]}
    return _read_config(resolve(name, cache_dir, materialize=False).path)


def check_fits(cell: Cell, cache_dir: Path | None = None, config: dict[str, Any] | None = None) -> str | None:
    """``None`` if the cell's scenario fits the model's context, else the reason (for a skip, before any backend
    loads): past the limit, learned position embeddings (OPT) index out of range and rotary ones (Llama)
    silently run positions the model was never built for."""
    cfg = config if config is not None else model_config(cell.model, cache_dir)
    limit = context_limit(cfg)
    if limit is None:
        return None
    field_name, max_len = limit
    sc = cell.scenario
    need = sc.prompt_tokens + sc.new_tokens
    what = f"prompt_tokens + new_tokens = {sc.prompt_tokens} + {sc.new_tokens} = {need}"
    if cell.backend in ("vllm", "vllm-llm") and isinstance(cell.option("max_model_len"), int) \
            and cell.option("max_model_len") > need:  # both engines take it (facts/backend_options.py)
        need = int(cell.option("max_model_len"))
        what = f"backend option max_model_len = {need}"
    if need <= max_len:
        return None
    return (f"scenario {sc.name!r} ({sc.slug}) does not fit model {cell.model!r}: {what} > its context of {max_len} "
            f"tokens ({field_name}); shorten the scenario in [tool.perfsuite.scenarios] or leave it out of this "
            "model's profile")


def checkpoint_digest(path: Path) -> str:
    """12 hex digits over a checkpoint folder's safetensors sizes and its config: what a derived cache (an ONNX
    export, an AWQ twin) is keyed by."""
    h = hashlib.sha256()
    for f in [*sorted(path.glob("*.safetensors")), path / "config.json"]:
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    h.update((path / "config.json").read_bytes())
    return h.hexdigest()[:12]


def _from_hub_cache(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - transformers always brings it
        raise ModelError(f"hub id {repo_id!r} needs huggingface_hub: pip install huggingface_hub") from exc
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception as exc:
        raise ModelError(
            f"hub id {repo_id!r} is not in the local Hugging Face cache and perfsuite never downloads; "
            f"fetch it elsewhere and pass its directory, or use a preset ({', '.join(sorted(PRESETS))})"
        ) from exc


def is_complete(target: Path, digest: str) -> bool:
    """Whether ``target`` holds a finished entry of ``digest`` (the format of :mod:`perfsuite.facts.cache_entry`): its
    marker names the digest and every file it lists is there at its recorded size (an interrupted write has no
    marker, or a short file). Sizes only: this runs on every worker start."""
    meta = cache_entry.read_marker(target, MARKER)
    return isinstance(meta, dict) and meta.get("digest") == digest and \
        cache_entry.files_problem(target, meta.get("files"), hashes=False) is None


def _materialize(preset: Preset, target: Path) -> None:
    """Build the seeded random-weight model in a temporary directory, then rename it into place."""
    import torch
    import transformers

    with cache_entry.building(target) as tmp:
        cfg_cls = transformers.AutoConfig.for_model(preset.config["model_type"]).__class__
        config = cfg_cls(**{k: v for k, v in preset.config.items() if k != "model_type"})
        config.architectures = [preset.architecture]
        torch.manual_seed(preset.seed)
        model_cls, dtype = getattr(transformers, preset.architecture), getattr(torch, preset.storage_dtype)
        model_cls._from_config(config, dtype=dtype).save_pretrained(tmp, safe_serialization=True)
        # an incomplete earlier attempt at target is never loaded: commit replaces it
        cache_entry.commit(tmp, target, {"name": preset.name, "digest": preset.digest,
                                         "transformers": transformers.__version__}, MARKER)


def prompts(batch_size: int, prompt_tokens: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Seeded token-id prompts, identical for every backend. Ids avoid the first 4 (special tokens)."""
    rng = random.Random(f"{seed}-{batch_size}-{prompt_tokens}-{vocab_size}")
    return [[rng.randrange(4, vocab_size) for _ in range(prompt_tokens)] for _ in range(batch_size)]
