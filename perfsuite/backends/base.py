"""The Backend protocol: one method per phase of LLM inference.

A backend is loaded lazily by name (see :mod:`perfsuite.backends`), so this module imports nothing heavy.
Every method that returns tokens returns them *on the host* (plain ``list[int]``): reading them back is
what synchronizes the device, so the clock read right after a call measures finished work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class MemoryStats:
    """Peak memory since the last :meth:`Backend.reset_peak_memory`; ``None`` where not measurable."""

    peak_allocated_bytes: int | None = None  # torch/ORT device allocator peak (GPU)
    peak_reserved_bytes: int | None = None  # caching allocator reserve (GPU)
    peak_rss_bytes: int | None = None  # resident set high-water mark of the process (CPU)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class StepResult:
    """Tokens produced by one prefill or one decode step: one token per sequence, on the host."""

    tokens: list[int]
    state: Any = field(repr=False)  # backend-private: KV cache, positions, request handles ...


@runtime_checkable
class Backend(Protocol):
    """What every backend implements. One instance serves one cell (backend x model x dtype x scenario), built from
    the resolved cell (``cell.model_dir`` set) and the session's cache folder: ``cls(cell, cache_dir=...)``.

    ``timed_metrics``: the tests whose rounds this backend times honestly (perfsuite.vocabulary.TIMED for a backend
    that exposes prefill and decode steps; ``("e2el",)`` for one that only times whole generations)."""

    name: str
    timed_metrics: tuple[str, ...]

    def metric_unavailable(self, metric: str) -> str | None:
        """``None`` if this backend times ``metric`` (ttft | tpot | e2el) honestly, else why not (the test skips)."""

    def availability(self) -> str | None:
        """``None`` if this backend can run the cell here, else a human reason naming what is missing.

        Must be cheap and must not load the model; it may import the backend's library.
        """

    def load(self) -> None:
        """Load weights (from ``cell.model_dir``) and do one-off preparation (export, engine start ...)."""

    def prefill(self, prompts: list[list[int]]) -> StepResult:
        """Run the prompts (equal length, one batch) and return the first generated token of each."""

    def decode(self, state: Any) -> StepResult:
        """One decode step: exactly one new token per sequence, greedy."""

    def release(self, state: Any) -> None:
        """Drop a generation's state (KV cache, engine request) so the next prefill starts clean."""

    def reset_peak_memory(self) -> None: ...

    def memory_stats(self) -> MemoryStats: ...

    def info(self) -> dict[str, Any]:
        """Facts for ``extra_info``: library versions, resolved options, providers in use ..."""

    def close(self) -> None:
        """Free everything; after this no process or device memory of the backend remains."""


class StepBackend:
    """Defaults for a backend that exposes real prefill and decode steps: every test is timed honestly."""

    timed_metrics: tuple[str, ...] = ("ttft", "tpot", "e2el")

    def metric_unavailable(self, metric: str) -> str | None:
        return None
