"""A known, real slowdown for calibrating the gate: any backend wrapped so that each decode step is followed by
host-side busy work for ``fraction`` x that step's own duration.

Enabled by ``PERFSUITE_INJECT_DECODE_SLOWDOWN=<fraction>`` in a worker's environment (never by the benchmark
matrix). It is real work on the timed path, not an edited number. Host-side integer arithmetic rather than
extra tensor ops: extra matmuls disturb the intra-op thread pool and slowed the step by 7-23 % for a 5 % request.
"""

from __future__ import annotations

import os
import time
from typing import Any

from perfsuite.measure.backends.base import StepBackend

ENV = "PERFSUITE_INJECT_DECODE_SLOWDOWN"


class InjectionError(ValueError):
    pass


def fraction_from_env() -> float:
    raw = os.environ.get(ENV, "")
    if raw.strip() == "":
        return 0.0
    try:
        f = float(raw)
    except ValueError:
        raise InjectionError(f"{ENV}={raw!r} is not a number; set a fraction such as 0.05 (5 % slower decode "
                             "steps) or unset it") from None
    if not 0.0 <= f <= 10.0:  # NaN too
        raise InjectionError(f"{ENV}={raw!r} is out of range; use a fraction in [0, 10] (0.05 = 5 % slower)")
    return f


def burn_for(seconds: float) -> int:
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


class SlowedDecode:
    """Wraps a backend (any implementation of perfsuite.measure.backends.base.Backend); everything but ``decode`` and
    ``info`` passes through."""

    def __init__(self, inner: Any, fraction: float) -> None:
        self._inner = inner
        self.fraction = fraction

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def generate(self, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
        """Through this wrapper's (slowed) decode, not the inner backend's own loop."""
        return StepBackend.generate(self, prompts, new_tokens)  # type: ignore[arg-type]

    def decode(self, state: Any) -> Any:
        t0 = time.perf_counter()
        step = self._inner.decode(state)
        burn_for(self.fraction * (time.perf_counter() - t0))
        return step

    def info(self) -> dict[str, Any]:
        return {**self._inner.info(), "injected_decode_slowdown": self.fraction}
