"""The Backend protocol: one method per phase of LLM inference.

A backend is loaded lazily by name (see :mod:`perfsuite.measure.backends`), so this module imports nothing heavy.
Every method that returns tokens returns them *on the host* (plain ``list[int]``): reading them back is
what synchronizes the device, so the clock read right after a call measures finished work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


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


class Backend(Protocol):
    """What every backend implements. One instance serves one cell (backend x model x dtype x scenario), built from
    the resolved cell (``cell.model_dir`` set) and the session's cache folder: ``cls(cell, cache_dir=...)``.

    ``timed_metrics``: the tests whose rounds this backend times honestly (:class:`StepBackend`: all of
    perfsuite.facts.vocabulary.TIMED; :class:`WholeBackend`: ``("e2el",)``, timing ``generate``)."""

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

    def generate(self, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
        """One whole greedy generation: ``new_tokens`` tokens per sequence, its state released afterwards."""

    def release(self, state: Any) -> None:
        """Drop a generation's state (KV cache, engine request) so the next prefill starts clean."""

    def reset_peak_memory(self) -> None: ...

    def memory_stats(self) -> MemoryStats: ...

    def info(self) -> dict[str, Any]:
        """Facts for ``extra_info``: library versions, resolved options, providers in use ..."""

    def close(self) -> None:
        """Free everything; after this no process or device memory of the backend remains."""


def has_steps(backend: Any) -> bool:
    return "tpot" in backend.timed_metrics


class StepBackend:
    """Defaults for a backend that exposes real prefill and decode steps: every test is timed honestly."""

    timed_metrics: tuple[str, ...] = ("ttft", "tpot", "e2el")

    def metric_unavailable(self, metric: str) -> str | None:
        return None

    def release(self, state: Any) -> None:
        del state

    def generate(self, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
        """Prefill, then one decode per further token."""
        res = self.prefill(prompts)  # type: ignore[attr-defined]
        tokens = [[t] for t in res.tokens]
        for _ in range(new_tokens - 1):
            res = self.decode(res.state)  # type: ignore[attr-defined]
            for seq, t in zip(tokens, res.tokens, strict=True):
                seq.append(t)
        self.release(res.state)  # type: ignore[attr-defined]
        return tokens


class NoStepsError(RuntimeError):
    """prefill()/decode() called on a backend that only runs whole generations."""


class WholeBackend:
    """Defaults for a backend that only runs whole generations (one library call returns all tokens, so there is
    no honest host-side TTFT or step time): only test_e2el is timed, by timing ``generate``."""

    timed_metrics: tuple[str, ...] = ("e2el",)
    name: str

    def metric_unavailable(self, metric: str) -> str | None:
        if metric in self.timed_metrics:
            return None
        return f"{self.name} runs whole generations only: no host-side {metric.upper()} exists there"

    def _no_steps(self) -> NoStepsError:
        return NoStepsError(f"{self.name} has no prefill/decode steps (timed_metrics = {self.timed_metrics}): "
                            "call generate(prompts, new_tokens) for a whole generation")

    def prefill(self, prompts: list[list[int]]) -> StepResult:
        raise self._no_steps()

    def decode(self, state: Any) -> StepResult:
        raise self._no_steps()

    def release(self, state: Any) -> None:
        del state
