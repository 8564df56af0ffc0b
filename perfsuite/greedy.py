"""One untimed greedy generation through any backend (prefill, then one decode per further token): for checks that
compare tokens across backends, not for measuring (perfsuite.measure times the same calls)."""

from __future__ import annotations

from typing import Any


def generate(backend: Any, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """The ``new_tokens`` greedy tokens of each prompt (one list per sequence); the generation is released."""
    res = backend.prefill(prompts)
    tokens = [[t] for t in res.tokens]
    for _ in range(new_tokens - 1):
        res = backend.decode(res.state)
        for seq, t in zip(tokens, res.tokens, strict=True):
            seq.append(t)
    backend.release(res.state)
    return tokens
