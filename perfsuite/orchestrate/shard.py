"""Spread a matrix of cells over several runners: a pure selection, and the pytest ``-k`` expression for it.

The ids are de-duplicated, sorted and dealt round-robin: every shard gets ``len // count`` or one more cell,
whatever the order the ids came in, and since ids start with the backend, each backend's slow cells (vLLM's engine
starts, torch.compile) are spread over the shards. Adding a cell may move others to another shard; their series do
not care (history is keyed by runner class, not by machine). pytest's ``-k`` matches the bracketed parameter id
exactly, so ``[torch-tiny-llama-float32-b1-p64-n32]`` does not also select ``...-n320``.
"""

from __future__ import annotations

from collections.abc import Iterable


class ShardError(ValueError):
    """A shard that cannot be formed; the message names the fix."""


def parse(text: str) -> tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ShardError(f"shard {text!r}: expected INDEX/COUNT, e.g. 2/3 (1-based)") from None
    _check(i, n)
    return i, n


def _check(index: int, count: int) -> None:
    if count < 1 or not 1 <= index <= count:
        raise ShardError(f"shard {index}/{count}: the index must be 1..{max(count, 1)} and the count >= 1")


def select(cell_ids: Iterable[str], index: int, count: int) -> list[str]:
    """The cell ids of shard ``index`` of ``count`` (1-based), sorted."""
    _check(index, count)
    return sorted(set(cell_ids))[index - 1::count]


def k_expression(cell_ids: Iterable[str]) -> str:
    ids = sorted(set(cell_ids))
    if not ids:
        raise ShardError("no cells: an empty -k expression would select every test")
    return " or ".join(f"[{i}]" for i in ids)
