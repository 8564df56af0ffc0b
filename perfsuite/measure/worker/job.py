"""The job a worker runs and the result it ships back. Plain dicts on the wire (JSON); these helpers build and
read them so both ends agree."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.facts import vocabulary
from perfsuite.facts.cells import Cell, cell_from_dict

PROTOCOL = 1  # bump when a job or result field changes meaning
__all__ = ["PROTOCOL", "cell_from_dict"]


def make_job(cell: Cell, metrics: list[str], *, generations: int, warmup: int, cache_dir: str | None,
             index: int = 0, label: str = "", cprofile: bool = False) -> dict[str, Any]:
    """The wire form of one job (perfsuite.measure.scheduler.Job.wire); the worker measures ``metrics`` in one loop."""
    bad = [m for m in metrics if m not in vocabulary.TIMED]  # tests/perf/test_latency.py has test_<metric>
    if bad or not metrics:
        raise ValueError(f"metrics must be a non-empty subset of {vocabulary.TIMED}, got {metrics}")
    return {"protocol": PROTOCOL, "cell": {**cell.as_dict(), "model": _absolute(cell.model)},
            "metrics": list(metrics), "generations": int(generations), "warmup": int(warmup), "cache_dir": cache_dir,
            "index": int(index), "label": label, "cprofile": bool(cprofile), "outputs": True}


def _absolute(model: str) -> str:
    """A checkpoint directory given relative to this process's cwd, as an absolute path: workers run elsewhere
    (``cwd`` = the perfsuite tree), where ``./m/model`` is another folder or none."""
    from perfsuite.facts.models import PRESETS

    p = Path(model).expanduser()
    return str(p.resolve()) if model not in PRESETS and not p.is_absolute() and p.is_dir() else model


@dataclasses.dataclass(frozen=True)
class MetricResult:
    """One metric measured by one process: pytest-benchmark's rounds and perfsuite's per-unit samples."""

    rounds_s: list[float]  # one per pytest-benchmark round (a prefill, a decode step or a generation)
    samples: dict[str, list[float]]  # per-unit values in ms (ttft_ms/tpot_ms/e2el_ms per generation, itl_ms)
    generated_tokens: int
    first_tokens: list[list[int]]
    memory: dict[str, int]
    cprofile_path: str | None = None
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)  # facts.metrics.outputs_record


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    """What one worker process measured (or why it could not)."""

    index: int
    pid: int
    label: str
    metrics: dict[str, MetricResult]
    backend_info: dict[str, Any]
    load_s: float
    wall_s: float  # process start to result, as the coordinator saw it
    perfsuite_file: str
    skip: str | None = None  # the backend cannot run here: its reason
    error: str | None = None  # it tried and failed: one line
    detail: str = ""  # traceback / log tail for the error
    skipped_metrics: dict[str, str] = dataclasses.field(default_factory=dict)  # metric -> why it cannot be timed

    @staticmethod
    def from_wire(d: Mapping[str, Any], *, pid: int, wall_s: float) -> ProcessResult:
        ms = {k: MetricResult(**v) for k, v in (d.get("metrics") or {}).items()}
        return ProcessResult(index=int(d.get("index", 0)), pid=pid, label=str(d.get("label", "")), metrics=ms,
                             backend_info=dict(d.get("backend_info") or {}), load_s=float(d.get("load_s", 0.0)),
                             wall_s=wall_s, perfsuite_file=str(d.get("perfsuite_file", "")), skip=d.get("skip"),
                             error=d.get("error"), detail=str(d.get("detail", "")),
                             skipped_metrics=dict(d.get("skipped_metrics") or {}))

    @staticmethod
    def failed(index: int, pid: int, label: str, error: str, detail: str, wall_s: float) -> ProcessResult:
        return ProcessResult(index, pid, label, {}, {}, 0.0, wall_s, "", None, error, detail)
