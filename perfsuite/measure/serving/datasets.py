"""Request datasets, seeded: random token prompts (``ignore_eos``: every request generates exactly its output
length), a small ShareGPT-format JSON generated into the cache (never downloaded), and a shared-prefix workload
(groups of requests with a common prefix: the prefix-caching axis)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfsuite.measure.serving.tokenizer import FIRST_ID, text_of

DATASETS = ("random", "sharegpt", "shared-prefix")


@dataclass(frozen=True)
class Request:
    prompt: list[int] | str  # token ids, or text
    prompt_len: int
    output_len: int


def as_text(req: Request) -> Request:
    """The same prompt as words of the offline tokenizer (perfsuite.measure.serving.tokenizer), which the server
    tokenizes back into the same ids: what ``vllm bench serve`` sends (text), so its tokenization is inside TTFT on
    both clients."""
    return req if isinstance(req.prompt, str) else Request(text_of(req.prompt), req.prompt_len, req.output_len)


def _ids(rng: np.random.Generator, n: int, vocab_size: int) -> list[int]:
    return [int(x) for x in rng.integers(FIRST_ID, vocab_size, size=n)]


def random_requests(n: int, input_len: int, output_len: int, vocab_size: int, seed: int = 0,
                    range_ratio: float = 0.0) -> list[Request]:
    """Lengths uniform in ``[len*(1-r), len*(1+r)]`` as vLLM's random dataset draws them; ``r = 0``: fixed."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        il = int(rng.integers(max(1, round(input_len * (1 - range_ratio))), round(input_len * (1 + range_ratio)) + 1))
        ol = int(rng.integers(max(1, round(output_len * (1 - range_ratio))), round(output_len * (1 + range_ratio)) + 1))
        out.append(Request(_ids(rng, il, vocab_size), il, ol))
    return out


def shared_prefix_requests(n: int, prefix_len: int, suffix_len: int, output_len: int, vocab_size: int,
                           groups: int = 4, seed: int = 0) -> list[Request]:
    """``groups`` common prefixes, each request one of them (round robin) plus its own random suffix."""
    rng = np.random.default_rng(seed)
    prefixes = [_ids(rng, prefix_len, vocab_size) for _ in range(groups)]
    return [Request(prefixes[i % groups] + _ids(rng, suffix_len, vocab_size), prefix_len + suffix_len, output_len)
            for i in range(n)]


def write_sharegpt(path: Path, conversations: int, vocab_size: int, seed: int = 0) -> Path:
    """A ShareGPT-format file (``[{"id", "conversations": [{"from": "human"|"gpt", "value"}]}]``) of word-token text
    with log-normal turn lengths; written atomically, kept once written."""
    if path.is_file():
        return path
    rng = np.random.default_rng(seed)
    data = []
    for i in range(conversations):
        turns = []
        for j in range(2 * int(rng.integers(1, 3))):
            n = int(np.clip(rng.lognormal(np.log(48 if j % 2 == 0 else 32), 0.6), 2, 400))
            turns.append({"from": "human" if j % 2 == 0 else "gpt", "value": text_of(_ids(rng, n, vocab_size))})
        data.append({"id": f"perfsuite-{seed}-{i}", "conversations": turns})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
    return path


def sharegpt_requests(path: Path, n: int, seed: int = 0, max_len: int = 2048,
                      fixed_output_len: int | None = None) -> list[Request]:
    """Like vLLM's ShareGPT sampling: first human turn as the prompt, the answer's length as the output length;
    conversations with fewer than 2 turns, a prompt or answer under 4 tokens (the answer's unless the output length
    is fixed), or prompt+answer over ``max_len`` are left out. Lengths count whitespace words (exact for the word
    tokenizer; an estimate for others)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"ShareGPT file {path}: {exc}") from None
    rng = np.random.default_rng(seed)
    out: list[Request] = []
    for k in rng.permutation(len(data)):
        conv = data[int(k)].get("conversations") or []
        if len(conv) < 2:
            continue
        prompt = str(conv[0].get("value", ""))
        pl, ol = len(prompt.split()), fixed_output_len or len(str(conv[1].get("value", "")).split())
        if pl < 4 or (ol < 4 and not fixed_output_len) or pl + ol > max_len:
            continue
        out.append(Request(prompt, pl, ol))
        if len(out) == n:
            return out
    raise ValueError(f"ShareGPT file {path} has {len(out)} usable conversations, {n} requested")
