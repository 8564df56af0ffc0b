"""A serving cell's tests: the session measures every selected serving cell once (perfsuite.measure.serving.cell);
each test records one latency metric of one cell in pytest-benchmark (rounds = that metric per request, or per
chunk for ITL, in seconds) with everything else in ``extra_info``, checks it against the server's /metrics and asks
the gate, like every other cell."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from perfsuite.adapters.pytest import hooks as pytest_session
from perfsuite.adapters.pytest import pbcompat
from perfsuite.facts.vocabulary import SERVING_THROUGHPUT
from perfsuite.measure.serving.cell import BACKEND, CellRuns, ServeCell, ServingConfig, prometheus_problem
from perfsuite.verdict.outcome import GateOutcome

if TYPE_CHECKING:
    from perfsuite.orchestrate.session import PerfSession

METRIC_OF_TEST = {f"test_{m}_under_load": m for m in ("ttft", "tpot", "itl", "e2el")}


def selected(session: PerfSession, conf: ServingConfig) -> list[ServeCell]:
    """The profile's serving cells under the session's filters: ``--perf-backend`` must include ``vllm`` (a serving
    cell runs vLLM's server) and ``--perf-model`` the cell's model."""
    s = session.settings
    if s.backends != s.profile.backends and "vllm" not in s.backends:
        return []
    return [c for c in conf.cells if s.models == s.profile.models or c.model in s.models]


def add_to_gate_family(session: PerfSession, items: Sequence[pytest.Item]) -> None:
    """Bonferroni: the serving tests with a comparable baseline share alpha with the other gated tests."""
    if session.gate is not None:
        session.gate.add_to_family([item.nodeid for item in items
                                    if METRIC_OF_TEST.get(getattr(item, "originalname", ""))])


def record(session: PerfSession, runs: CellRuns, conf: ServingConfig, benchmark: Any,
           request: pytest.FixtureRequest) -> dict[str, Any]:
    from perfsuite.verdict import stats

    metric = METRIC_OF_TEST[request.node.originalname]
    cell = runs.cell
    reps = runs.replicates
    problem = runs.error or ("no server start measured it" if not reps else prometheus_problem(runs))
    if problem:
        pytest_session.enforce(GateOutcome(failure=f"perfsuite: {cell.id}: {problem}"))
    key = f"{metric}_ms"
    values = [v for rep in reps for v in rep.result["samples"].get(key, [])]
    if not values:
        pytest_session.enforce(GateOutcome(skip=f"{cell.id}: no {metric} values (outputs of one token have no TPOT or "
                                                "ITL)"))
    benchmark.group = f"{metric} under load: {cell.point.slug}"
    info = benchmark.extra_info
    info.update(cell=cell.as_dict(), metric=metric, runner_class=session.runner_class)
    for stat in ("mean", "median", "p90", "p99"):
        info[f"{stat}_{metric}_ms"] = stats.statistic(values, stat)
    per_start = [rep.result["metrics"] for rep in reps]
    for k in SERVING_THROUGHPUT:
        if all(k in m for m in per_start):
            info[k] = float(np.mean([m[k] for m in per_start]))
    info.update({k: max(m[k] for m in per_start) for k in ("p99_dispatch_delay_ms", "client_cpu_share")})
    info["client_cpus"] = next((rep.result.get("client_cpus") for rep in reps if rep.result.get("client_cpus")),
                               None)  # where the load generator ran (None: where the kernel put it)
    info["samples"] = {key: values}
    info["processes"] = [{"index": rep.index, "pid": rep.pid, "load_s": round(rep.start_s, 3),
                          "wall_s": round(rep.result["metrics"]["duration"], 4),
                          "samples": {key: rep.result["samples"].get(key, [])}, "metrics": rep.result["metrics"],
                          "prometheus": rep.result["prometheus"]} for rep in reps]
    info["records"] = [r for rep in reps for r in rep.result["records"]]
    sweeps = [rep.result["sweep"] for rep in reps if rep.result.get("sweep")]
    if sweeps:  # a sweep cell: the knee of each start (per start in processes); the lowest knee on top
        for proc, rep in zip(info["processes"], reps, strict=True):
            proc["sweep"] = rep.result.get("sweep")
        low = min(sweeps, key=lambda s: -1.0 if s["knee_rate"] is None else s["knee_rate"])
        info["sweep"] = {**low, "knee_rate_per_start": [s["knee_rate"] for s in sweeps]}
    p = cell.point.load
    info["measured_by"] = {"profile": session.settings.profile.name, "generations": p.num_requests,
                           "warmup_generations": p.warmup, "worker_processes": conf.server_starts,
                           "mode": "server", "options_hash": cell.as_dict()["options_hash"], "backend": BACKEND}
    if pbcompat.is_disabled(benchmark):
        pbcompat.set_mode(benchmark, "perfsuite serving cell (pytest-benchmark disabled: nothing recorded)")
        return info
    pbcompat.record_rounds(benchmark, [v / 1e3 for v in values],
                           "perfsuite serving cell (vLLM OpenAI server under load)")
    pytest_session.enforce(session.gate_check(request.node.nodeid, info, pbcompat.stats_dict(benchmark)))
    return info
