"""Runs inside a worker process: build the cell's backend, load it, run perfsuite.measure.loop's one timed generation
loop for the requested metrics, read memory and facts, close. Timing happens here, nowhere else."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import traceback
from pathlib import Path
from typing import Any

from perfsuite.measure.worker.job import cell_from_dict


def run_job(job: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Measure one job; returns the wire result (never raises for a backend failure: it is reported)."""
    from perfsuite.facts import PACKAGE_FILE
    from perfsuite.measure.lockstep import Gate

    base: dict[str, Any] = {"index": job.get("index", 0), "label": job.get("label", ""),
                            "perfsuite_file": PACKAGE_FILE, "pid": os.getpid()}
    gate = Gate.connect(job.get("lockstep"))  # a lockstep pair's turns (none: run freely)
    try:
        return {**base, **_measure(job, workdir, gate)}
    except Exception as exc:
        return {**base, "error": _one_line(exc), "detail": traceback.format_exc()[-4000:]}
    finally:
        gate.close()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:600]}"


def _measure(job: dict[str, Any], workdir: Path, gate: Any) -> dict[str, Any]:
    if job.get("kind") == "peaks":  # the run-start roofline references, measured in a worker like everything else
        from perfsuite.machine.roofline import peaks

        return {"backend_info": {"peaks": peaks.measure_peaks(job["device"], job["dtype"])}}
    if job.get("kind") == "op":  # one cell of the op matrix (perfsuite.measure.ops.worker isolates the risky ones)
        from perfsuite.measure.ops.runner import evaluate
        from perfsuite.measure.ops.shapes import Shape

        res = evaluate(job["op"], job["backend"], job["dtype"], Shape.from_dict(job["shape"]), job["seed"],
                       job.get("device", "cpu"))  # an older tree's "check_kernels" (always true) is not needed
        return {"backend_info": {"op_result": res.as_dict()}}
    from perfsuite.facts import models
    from perfsuite.machine import devicemem
    from perfsuite.measure import loop as measure
    from perfsuite.measure.backends import create, inject

    cell = cell_from_dict(job["cell"])
    cache = Path(job["cache_dir"]) if job.get("cache_dir") else None
    fraction = inject.fraction_from_env()  # a bad value is an error before anything loads
    reason = create(cell).availability()  # cheap, before the model is materialised
    if reason:
        return {"skip": f"{cell.backend}: {reason}"}
    resolved = models.resolve(cell.model, cache)
    cell = dataclasses.replace(cell, model_dir=resolved.path)
    inner = create(cell, cache)  # built from the resolved cell; derived artefacts (ONNX exports) go under cache
    backend = inject.SlowedDecode(inner, fraction) if fraction > 0 else inner
    sc = cell.scenario
    prompts = models.prompts(sc.batch_size, sc.prompt_tokens, resolved.vocab_size, cell.seed)
    gens, warm = int(job["generations"]), int(job["warmup"])
    t0 = time.perf_counter()
    backend.load()
    load_s = time.perf_counter() - t0
    try:
        # e.g. vllm-llm times whole generate() calls: it has no honest TTFT/TPOT
        skipped = {m: why for m in job["metrics"] if (why := backend.metric_unavailable(m))}
        wanted = [m for m in job["metrics"] if m not in skipped]
        # one timed generation loop yields every wanted test's rounds (device memory: every process on the device,
        # vLLM's workers too; nothing on the CPU)
        backend.reset_peak_memory()
        sampler = devicemem.DeviceMemorySampler(cell.device, devicemem.default_indices(cell.tensor_parallel_size)) \
            if cell.device != "cpu" and wanted else None
        with sampler or contextlib.nullcontext():
            measured = measure.measure_generations(backend, prompts, sc.new_tokens, gens, warm, wanted,
                                                   turn=gate.turn) if wanted else {}
        memory = backend.memory_stats().as_dict()
        if sampler is not None:
            memory.update({k: v for k, v in sampler.result.extra_info().items() if isinstance(v, int)})
        out = {metric: {"rounds_s": m.rounds_s, "samples": m.samples, "generated_tokens": m.generated_tokens,
                        "first_tokens": [s[:8] for s in m.tokens], "memory": memory,
                        **({"outputs": m.outputs} if job.get("outputs") else {}),
                        "cprofile_path": _profile_once(backend, prompts, sc.new_tokens, metric, workdir, job)
                        if job.get("cprofile") else None} for metric, m in measured.items()}
        info = backend.info()
    finally:
        backend.close()
    return {"metrics": out, "skipped_metrics": skipped, "backend_info": info, "load_s": load_s}


def _profile_once(backend: Any, prompts: list[list[int]], new_tokens: int, metric: str, workdir: Path,
                  job: dict[str, Any]) -> str:
    """--benchmark-cprofile: one extra, untimed unit of the metric under cProfile, dumped for the coordinator."""
    import cProfile

    from perfsuite.measure import loop as measure

    prof = cProfile.Profile()
    prof.runcall(measure.generate, backend, prompts, 1 if metric == "ttft" else new_tokens)
    path = workdir / f"cprofile-{job.get('label', '')}{job.get('index', 0)}-{metric}.prof"
    prof.dump_stats(str(path))
    return str(path)
