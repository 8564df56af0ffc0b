"""Per-operator time of a few generations under the backend's own profiler, in a fresh process of one side's tree.

``python <this tree>/perfsuite/measure/opprofile.py JOB.json OUT.json`` runs as a *script* with the side's tree first
on PYTHONPATH, so it profiles that side's code: the baselines' commit (A) usually predates this file, and older trees
spell their modules in the flat layout (both are tried). These generations are never timed ones: the operator diff
(perfsuite.verdict.opdiff) runs after an A/B has decided.

* torch, torch-compile: ``torch.profiler`` over the generations; an operator's time is its self time (CPU), or on
  a GPU the kernels' self device time, so the operators add up to the whole.
* onnxruntime-*: ONNX Runtime's session profiling, switched on for every session the backend creates; an operator
  is a node type (``op_name``), its time the node events of the profiled generations' ``model_run``s.
* vLLM: not profiled (its model runs in the engine-core process; its torch-profiler hook writes traces there).

JOB: ``cell`` (a cell dict), ``cache_dir``, ``generations``, ``warmup``, ``trace`` (path of the trace to write).
OUT: ``tool``, ``tokens`` (generated), ``ops`` {operator: ms}, ``calls`` {operator: count}, ``trace``; or ``skip`` /
``error`` with the reason.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import importlib
import json
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def _module(*names: str) -> Any:
    """The first of ``names`` the side's tree holds (its layout: layers since 2026-12-05, flat before)."""
    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return importlib.import_module(names[-1])


def _generate(backend: Any, prompts: list[list[int]], new_tokens: int) -> int:
    if hasattr(backend, "generate"):
        return sum(len(t) for t in backend.generate(prompts, new_tokens))
    step = backend.prefill(prompts)
    for _ in range(new_tokens - 1):
        step = backend.decode(step.state)
    backend.release(step.state)
    return len(prompts) * new_tokens


def _totals(rows: Iterable[tuple[str, float, int]]) -> tuple[dict[str, float], dict[str, int]]:
    """Time (ms) and calls per operator of (operator, ms, calls) rows, summed in their order."""
    ops: dict[str, float] = {}
    calls: dict[str, int] = {}
    for name, ms, n in rows:
        ops[name] = ops.get(name, 0.0) + ms
        calls[name] = calls.get(name, 0) + n
    return ops, calls


def self_times(events: Any) -> tuple[dict[str, float], dict[str, int]]:
    """Self time (ms) and calls per operator name of raw CPU profiler events (``.name()``, ``.start_ns()``,
    ``.end_ns()``, ``.start_thread_id()``): an event's time less that of the events nested in it on its thread, and a
    child named like its only parent counted once, as torch's ``key_averages()`` does. It is the same figure in 0.3 s
    where ``key_averages()`` takes 1.5 s per generation of tiny-llama (it builds Python objects for ~27k events)."""
    threads: dict[int, list[Any]] = {}
    for e in events:
        threads.setdefault(e.start_thread_id(), []).append(e)
    rows: list[tuple[str, float, int]] = []

    def close(item: list[Any]) -> None:
        _, name, ns, children_ns, n_children, last_child = item
        rows.append((name, (ns - children_ns) / 1e6, 0 if n_children == 1 and last_child == name else 1))

    for evs in threads.values():
        evs.sort(key=lambda e: (e.start_ns(), -e.end_ns()))
        stack: list[list[Any]] = []  # [end, name, ns, children's ns, children, last child's name]
        for e in evs:
            start, end = e.start_ns(), e.end_ns()
            while stack and stack[-1][0] <= start:
                close(stack.pop())
            if stack:
                stack[-1][3] += end - start
                stack[-1][4] += 1
                stack[-1][5] = e.name()
            stack.append([end, e.name(), end - start, 0, 0, ""])
        while stack:
            close(stack.pop())
    return _totals(rows)


GPU_KINDS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})  # torch's own set (torch/profiler/_cupti_monitor_trace.py)


def device_times(events: Any) -> tuple[dict[str, float], dict[str, int]]:
    """Time (ms) and calls per name of raw GPU events: kernels, copies and sets (``.activity_type()`` in
    ``GPU_KINDS``), which do not nest; on ROCm and CUDA these are the operators. Device-side annotations
    (``gpu_user_annotation``) span kernels and are left out. (``key_averages()`` also gives every CPU operator the
    device time of the kernels it launched, so summing its rows counted each kernel twice.)"""
    return _totals((e.name(), (e.end_ns() - e.start_ns()) / 1e6, 1) for e in events if e.activity_type() in GPU_KINDS)


def torch_ops(run: Callable[[], int], device: str, trace: Path | None) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device != "cpu" else [])
    with profile(activities=acts) as prof:
        tokens = run()
    if trace is not None:  # seconds for a few generations: only the runs whose trace is kept write one
        prof.export_chrome_trace(str(trace))
    kind = "self device time (kernels)" if device != "cpu" else "self CPU time"
    raw = getattr(getattr(prof.profiler, "kineto_results", None), "events", None)
    cpu = torch.autograd.DeviceType.CPU
    if raw is not None:
        events = raw()
        ops, calls = (self_times(e for e in events if e.device_type() == cpu) if device == "cpu"
                      else device_times(events))
    else:  # a torch without raw events: its averages, a GPU's kernel rows only
        rows = [(e.key, e.self_cpu_time_total if device == "cpu" else
                 e.self_device_time_total if getattr(e, "device_type", cpu) != cpu else 0, int(e.count))
                for e in prof.key_averages()]
        ops, calls = _totals((key, us / 1e3, n) for key, us, n in rows if us > 0)
    return {"tool": f"torch.profiler {torch.__version__}, {kind}", "tokens": tokens, "ops": ops, "calls": calls}


class OrtSessions:
    """Switches ONNX Runtime's profiling on for every session created while active, and counts each one's runs."""

    def __init__(self, prefix: Path) -> None:
        import onnxruntime as ort

        self.ort, self.prefix = ort, prefix
        self.made: list[Any] = []
        self.original = ort.InferenceSession.__init__

    def __enter__(self) -> OrtSessions:
        def init(sess: Any, path: Any, sess_options: Any = None, *args: Any, **kwargs: Any) -> None:
            so = sess_options or self.ort.SessionOptions()
            so.enable_profiling = True
            so.profile_file_prefix = str(self.prefix)
            self.original(sess, path, so, *args, **kwargs)
            sess._perfsuite_runs = 0
            run = sess.run

            def counted(*a: Any, **k: Any) -> Any:
                sess._perfsuite_runs += 1
                return run(*a, **k)

            sess.run = counted
            self.made.append(sess)

        self.ort.InferenceSession.__init__ = init
        return self

    def __exit__(self, *exc: Any) -> None:
        self.ort.InferenceSession.__init__ = self.original

    def profile(self, run: Callable[[], int], trace: Path | None) -> dict[str, Any]:
        """``run``'s node time per operator: the sessions' runs before it (loading, warm-up) are left out."""
        runs_before = {id(s): s._perfsuite_runs for s in self.made}
        tokens = run()
        rows: list[tuple[str, float, int]] = []
        traces = []
        for s in self.made:
            events = json.loads(Path(s.end_profiling()).read_text())
            traces.append(events)
            runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                          key=lambda e: e["ts"])[runs_before.get(id(s), 0):]
            nodes = sorted((e for e in events if e.get("cat") == "Node"
                            and str(e.get("name", "")).endswith("_kernel_time")), key=lambda e: e["ts"])
            starts = [e["ts"] for e in nodes]
            for r in runs:  # the node events inside each profiled run
                inside = nodes[bisect.bisect_left(starts, r["ts"]):bisect.bisect_right(starts, r["ts"] + r["dur"])]
                rows += [(str((e.get("args") or {}).get("op_name", e["name"])), e["dur"] / 1e3, 1) for e in inside]
        ops, calls = _totals(rows)
        if trace is not None:
            trace.write_text(json.dumps([e for events in traces for e in events]))
        return {"tool": f"onnxruntime {self.ort.__version__} session profiling, node time", "tokens": tokens,
                "ops": ops, "calls": calls}


def profile_job(job: dict[str, Any]) -> dict[str, Any]:
    cell_from_dict = _module("perfsuite.measure.worker.job", "perfsuite.worker.job").cell_from_dict
    models = _module("perfsuite.facts.models", "perfsuite.models")
    create = _module("perfsuite.measure.backends", "perfsuite.backends").create
    cell = cell_from_dict(job["cell"])
    if cell.backend.startswith("vllm"):
        return {"skip": f"{cell.backend}: not profiled (vLLM runs its model in its engine-core process; its torch "
                        "profiler hook, VLLM_TORCH_PROFILER_DIR, writes traces there and perfsuite does not read them)"}
    cache = Path(job["cache_dir"]) if job.get("cache_dir") else None
    resolved = models.resolve(cell.model, cache)
    cell = dataclasses.replace(cell, model_dir=resolved.path)
    sc = cell.scenario
    prompts = models.prompts(sc.batch_size, sc.prompt_tokens, resolved.vocab_size, cell.seed)
    trace = Path(job["trace"]) if job.get("trace") else None
    keep = trace or Path(job.get("workdir") or ".") / "ort-profile.json"
    gens, warm = int(job.get("generations", 3)), int(job.get("warmup", 1))

    def run() -> int:
        return sum(_generate(backend, prompts, sc.new_tokens) for _ in range(gens))

    sessions = OrtSessions(keep.with_suffix("")) if cell.backend.startswith("onnxruntime") else None
    with sessions or contextlib.nullcontext():
        backend = create(cell, cache)
        backend.load()
    try:
        for _ in range(warm):
            _generate(backend, prompts, sc.new_tokens)
        out = torch_ops(run, cell.device, trace) if sessions is None else sessions.profile(run, trace)
    finally:
        backend.close()
    return {**out, **({"trace": str(trace)} if trace else {})}


def run(side: Any, cell: dict[str, Any], workdir: Path, label: str, *, generations: int = 3, warmup: int = 1,
        cache_dir: str | None = None, timeout_s: float = 300, trace: bool = True) -> dict[str, Any]:
    """The coordinator's side: profile ``cell`` in a fresh process of ``side`` (a perfsuite.measure.worker.pool.Side):
    this file, run as a script by the side's interpreter, with the side's tree first on PYTHONPATH."""
    from perfsuite.machine.external import run_tool
    from perfsuite.measure.worker.pool import last_line

    job, out = workdir / f"profile-{label}.job.json", workdir / f"profile-{label}.out.json"
    job.write_text(json.dumps({"cell": cell, "cache_dir": cache_dir, "generations": generations, "warmup": warmup,
                               "trace": str(workdir / f"trace-{label}.json") if trace else None,
                               "workdir": str(workdir)}))
    proc = run_tool([side.python, str(Path(__file__).resolve()), str(job), str(out)], timeout_s, cwd=side.tree,
                    env=side.environ())
    try:
        return dict(json.loads(out.read_text()))
    except (OSError, ValueError):
        return {"error": f"the profile process of side {label} ended without a result ({last_line(proc)[:300]})"}


def main(argv: list[str]) -> int:
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # this folder holds modules named like stdlib ones; the side's tree comes first
    if len(argv) != 2:
        print("usage: python opprofile.py JOB.json OUT.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text())
    try:
        out = profile_job(job)
    except Exception as exc:  # reported, never raised: the diff says which side could not be profiled
        out = {"error": f"{type(exc).__name__}: {exc}"[:600], "detail": traceback.format_exc()[-3000:]}
    Path(argv[1]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
