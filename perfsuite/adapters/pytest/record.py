"""One perf test's record: the ``perf`` fixture hands each test a :class:`PerfRun`, whose :meth:`PerfRun.run` puts the
workers' rounds into the test's pytest-benchmark fixture (its statistics and JSON stay per token), fills
``extra_info`` (pooled samples, one entry per process, how it was measured, the roofline) and raises the gate's word
in the test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from perfsuite.adapters.pytest import pbcompat
from perfsuite.adapters.pytest.hooks import enforce
from perfsuite.facts.cells import Cell
from perfsuite.orchestrate.plan import CellResult, pooled_samples, process_entry
from perfsuite.orchestrate.session import PerfSession
from perfsuite.verdict.outcome import GateOutcome


@dataclass
class PerfRun:
    session: PerfSession
    cell: Cell
    result: CellResult

    def run(self, metric: str, benchmark: Any, request: pytest.FixtureRequest) -> dict[str, Any]:
        from perfsuite.facts import metrics

        res = self.result
        procs = [p for p in res.processes if metric in p.metrics]
        why = next((p.skipped_metrics[metric] for p in res.processes if metric in p.skipped_metrics), None)
        if not procs:
            enforce(GateOutcome(skip=why) if why else GateOutcome(
                failure=f"perfsuite: no worker measured {metric} for {self.cell.id}"))
        benchmark.group = f"{metric}: {self.cell.scenario.slug}"
        info = benchmark.extra_info
        pooled = pooled_samples(procs, metric)
        first = procs[0].metrics[metric].first_tokens
        info.update(cell=self.cell.as_dict(), metric=metric, runner_class=self.session.runner_class)
        info.update(metrics.aggregates(pooled, self.cell.scenario))
        info.update(samples=pooled, generated_tokens=sum(p.metrics[metric].generated_tokens for p in procs),
                    processes=[process_entry(p, metric) for p in procs], measured_by=dict(res.measured_by))
        for key in sorted({k for p in procs for k in p.metrics[metric].memory}):
            info[key] = max(p.metrics[metric].memory.get(key, 0) for p in procs)
        info["backend_info"] = procs[0].backend_info
        info.update(_roofline_info(self.session, self.cell, info))
        info.update(first_tokens=first, tokens_agree=all(p.metrics[metric].first_tokens == first for p in procs),
                    outputs=metrics.outputs_merge([p.metrics[metric].outputs for p in procs]))
        if pbcompat.is_disabled(benchmark):
            pbcompat.set_mode(benchmark, "perfsuite worker processes (pytest-benchmark disabled: nothing timed)")
            self.session.notes.append(f"perfsuite: {request.node.nodeid}: pytest-benchmark is disabled; the workload "
                                      "ran once in a worker process and nothing was timed")
            return info
        # pytest-benchmark has no public API for values timed elsewhere: pbcompat owns its private names
        pbcompat.record_rounds(benchmark, [r for p in procs for r in p.metrics[metric].rounds_s],
                               "perfsuite worker processes")
        prof = res.profiles.get(metric)
        if prof is not None and pbcompat.wants_cprofile(benchmark):
            pbcompat.set_cprofile_stats(benchmark, prof)
        enforce(self.session.gate_check(request.node.nodeid, info, pbcompat.stats_dict(benchmark)))
        return info


def _roofline_info(session: PerfSession, cell: Cell, info: dict[str, Any]) -> dict[str, Any]:
    """Achieved bandwidth / FLOP/s of this cell against the peaks measured at run start (perfsuite.machine.roofline)."""
    from perfsuite.facts import models
    from perfsuite.machine.roofline.annotate import annotate

    peaks = session.peaks or {}
    try:
        config = models.resolve(cell.model, session.settings.config.cache_dir, materialize=False).config()
        return annotate(cell, config, info, peaks.get("copy_bandwidth_bytes_per_s"),
                        device_name=(info.get("backend_info") or {}).get("device_name"),
                        matmul_flops_per_s=peaks.get("matmul_flops_per_s"), llc_bytes=peaks.get("llc_bytes"),
                        cache_bandwidth_bytes_per_s=peaks.get("cache_copy_bandwidth_bytes_per_s"))
    except (OSError, ValueError, KeyError, models.ModelError) as exc:
        return {"roofline_error": f"{type(exc).__name__}: {exc}"}
