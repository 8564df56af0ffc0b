"""A tokenizer for a preset's serving folder. vLLM's server and ``vllm bench serve`` need one in the model folder and
the presets (seeded random weights) have none: a WordLevel tokenizer built offline with the ``tokenizers`` library,
one word ``t<id>`` per token id, special tokens on ids of their own. Text built from those words tokenizes back to
exactly the same ids, so prompt lengths are exact for text and token-id prompts alike.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from perfsuite.facts import cache_entry

SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")  # ids 0..3, as models.prompts() avoids them
FIRST_ID = len(SPECIALS)


def word(token_id: int) -> str:
    return f"t{token_id}"


def text_of(ids: list[int]) -> str:
    return " ".join(word(i) for i in ids)


def build(target: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    vocab.update({word(i): i for i in range(FIRST_ID, vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(SPECIALS))
    tok.save(str(target / "tokenizer.json"))
    (target / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>",
        "pad_token": "<pad>", "model_max_length": 1 << 20, "clean_up_tokenization_spaces": False}, indent=1))


def serving_dir(model_dir: Path, cache_dir: Path, name: str) -> Path:
    """``<cache>/serve-models/<name>/``: links to the model's files plus the word tokenizer (built once, atomically).
    A checkpoint that has its own tokenizer is served from its own folder."""
    if (model_dir / "tokenizer.json").is_file() or (model_dir / "tokenizer.model").is_file():
        return model_dir
    target = cache_dir / "serve-models" / name
    if (target / "tokenizer.json").is_file():
        return target
    vocab = int(json.loads((model_dir / "config.json").read_text())["vocab_size"])
    with cache_entry.building(target) as tmp:
        for f in model_dir.iterdir():
            if f.is_file():
                os.symlink(f.resolve(), tmp / f.name)
        build(tmp, vocab)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    return target
