"""One perf test = one measurement of one cell, recorded in pytest-benchmark's stats and ``extra_info``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from perfsuite import measure
from perfsuite.cells import Cell

if TYPE_CHECKING:
    from perfsuite.backends.base import Backend
    from perfsuite.session import PerfSession


@dataclass
class PerfRun:
    """Handed to each perf test by the ``perf`` fixture."""

    session: PerfSession
    cell: Cell
    backend: Backend
    prompts: list[list[int]]

    def run(self, metric: str, benchmark: Any, request: pytest.FixtureRequest) -> measure.Measurement:
        p = self.session.settings.profile
        sc = self.cell.scenario
        benchmark.group = f"{metric}: {sc.slug}"
        self.backend.reset_peak_memory()
        if metric == "ttft":
            m = measure.measure_ttft(benchmark, self.backend, self.prompts, p.generations, p.warmup_generations)
        elif metric == "tpot":
            m = measure.measure_tpot(benchmark, self.backend, self.prompts, sc.new_tokens, p.generations,
                                     p.warmup_generations)
        elif metric == "e2e":
            m = measure.measure_e2e(benchmark, self.backend, self.prompts, sc.new_tokens, p.generations,
                                    p.warmup_generations)
        else:  # pragma: no cover - tests call with literals
            raise ValueError(metric)
        info = benchmark.extra_info
        info["cell"] = self.cell.as_dict()
        info["metric"] = m.metric
        info["runner_class"] = self.session.runner_class
        info.update(m.aggregates(self.cell))
        info["samples"] = m.samples
        info["generated_tokens"] = m.generated_tokens
        info.update(self.backend.memory_stats().as_dict())
        info["backend_info"] = self.backend.info()
        info["first_tokens"] = [seq[:8] for seq in m.tokens]
        self.session.gate_check(request.node.nodeid, benchmark)
        return m
