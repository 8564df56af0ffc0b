"""Run one (op, backend, dtype, shape) cell and classify it (docs/ops.md, "Classification").

Statuses, worst last: pass, unsupported, fallback, wrong, crash (a matrix cell shows the worst); ``crash`` is only
observable in a worker process (:mod:`perfsuite.measure.ops.worker`).
"""

from __future__ import annotations

import functools
import json
import time
import traceback
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from perfsuite.measure.ops import registry
from perfsuite.measure.ops.shapes import Shape

STATUSES = ("pass", "unsupported", "fallback", "wrong", "crash")
SEVERITY = {s: i for i, s in enumerate(STATUSES)}

TORCH_BACKENDS = ("torch", "torch-compile")
ORT_BACKENDS = ("onnxruntime-cpu", "onnxruntime-cuda", "onnxruntime-rocm", "onnxruntime-migraphx", "onnxruntime-dml")
BACKENDS = TORCH_BACKENDS + ORT_BACKENDS

SDPA_KERNELS = {
    "flash": ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_for_cpu"),
    "efficient": ("aten::_scaled_dot_product_efficient_attention",),
    "cudnn": ("aten::_scaled_dot_product_cudnn_attention",),
    "math": ("aten::_scaled_dot_product_attention_math", "aten::_scaled_dot_product_attention_math_for_mps"),
}


def expected_sdpa(device: str, dtype: str) -> frozenset[str] | None:
    """Kernel families an SDPA call may use without it counting as a fallback (None: anything goes)."""
    if device == "cpu":
        return frozenset({"flash"})
    if dtype in ("float16", "bfloat16"):
        return frozenset({"flash", "efficient", "cudnn"})
    return None


def seed_for(op: str, dtype: str, shape: Shape) -> int:
    """Deterministic data seed of an example: the same shape always gets the same numbers."""
    return zlib.crc32(json.dumps([op, dtype, shape.as_dict()], sort_keys=True).encode()) & 0x7FFFFFFF


@dataclass
class OpResult:
    op: str
    backend: str
    dtype: str
    shape: dict[str, Any]
    seed: int
    status: str
    detail: str = ""
    max_ratio: float = 0.0  # max |err| / tol, the hypothesis target
    max_abs_err: float = 0.0
    nan_where_finite: int = 0
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def shape_class(self) -> str:
        return str(self.shape["shape_class"])

    def repro(self) -> dict[str, Any]:
        """Everything needed to rerun this exact cell: ``perfsuite ops --repro '<json>'``."""
        return {"op": self.op, "backend": self.backend, "dtype": self.dtype, "shape": self.shape, "seed": self.seed}

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "max_ratio": _finite(self.max_ratio), "max_abs_err": _finite(self.max_abs_err)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpResult:
        # as_dict writes a non-finite max_ratio/max_abs_err as "inf"/"-inf" (JSON has none)
        got: dict[str, Any] = {k: float(d[k]) if k in ("max_ratio", "max_abs_err") else d[k]
                               for k in cls.__dataclass_fields__ if k in d}
        return cls(**got)


def _finite(x: float) -> float | str:
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


# --------------------------------------------------------------------------------------------- caches

@functools.lru_cache(maxsize=8)
def _reference(op_name: str, dtype: str, shape: Shape, seed: int) -> tuple[dict[str, np.ndarray], registry.Ref]:
    op = registry.get(op_name)
    inputs = op.make_inputs(shape, dtype, seed)
    return inputs, op.reference(inputs, shape)


@functools.cache
def compiled(op_name: str, dtype: str, device: str) -> Any:
    """``torch.compile(dynamic=True, fullgraph=True)`` of the op's eager function, once per (op, dtype, device)."""
    import torch
    import torch._dynamo.config as dcfg

    # Dynamo caches per code object, so every (op, dtype) pair and every specialised int shares one budget.
    # Raise it, and make hitting it an error: otherwise dynamo silently runs the function eagerly.
    dcfg.recompile_limit = max(dcfg.recompile_limit, 64)
    dcfg.accumulated_recompile_limit = max(dcfg.accumulated_recompile_limit, 1024)
    dcfg.fail_on_recompile_limit_hit = True
    op = registry.get(op_name)
    return torch.compile(op.torch_compiled or op.torch, dynamic=True, fullgraph=True)


_SESSIONS: dict[tuple[Any, ...], Any] = {}


def ort_session(op_name: str, backend: str, dtype: str, shape: Shape) -> Any:
    from perfsuite.measure.ops import ort_adapter

    op = registry.get(op_name)
    key = (op_name, backend, dtype, op.onnx_key(shape))
    if key not in _SESSIONS:
        if len(_SESSIONS) > 64:
            _SESSIONS.clear()
        assert op.onnx is not None
        _SESSIONS[key] = ort_adapter.make_session(op.onnx(shape, dtype).SerializeToString(), backend, dtype)
    return _SESSIONS[key]


# --------------------------------------------------------------------------------------------- running

def _torch_inputs(op: registry.Op, inputs: dict[str, np.ndarray], dtype: str, device: str) -> dict[str, Any]:
    import torch

    out = {}
    for k, v in inputs.items():
        t = torch.from_numpy(np.ascontiguousarray(v))
        if k in op.int_inputs or not np.issubdtype(v.dtype, np.floating):
            out[k] = t.to(device)
        else:
            out[k] = t.to(device=device, dtype=torch.float32 if k in op.keep_dtype else getattr(torch, dtype))
    return out


def _to_numpy(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(_to_numpy(y) for y in x)
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu").float().numpy() if x.is_floating_point() else x.detach().to("cpu").numpy()
    return np.asarray(x)


def _devices(x: Any) -> set[str]:
    if isinstance(x, tuple):
        return set().union(*(_devices(y) for y in x))
    return {x.device.type} if hasattr(x, "device") else set()


def _sdpa_families(fn: Any) -> tuple[Any, set[str]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    names = {e.name for e in prof.events()}
    return out, {fam for fam, ops in SDPA_KERNELS.items() if names & set(ops)}


def run_backend(op: registry.Op, backend: str, dtype: str, shape: Shape, inputs: dict[str, np.ndarray],
                device: str) -> tuple[Any, str | None, dict[str, Any]]:
    """(output as numpy, fallback reason or None, extra facts). Raises when the backend cannot run the cell."""
    extra: dict[str, Any] = {}
    if backend in TORCH_BACKENDS:
        import torch

        t_in = _torch_inputs(op, inputs, dtype, device)
        fn = op.torch if backend == "torch" else compiled(op.name, dtype, device)
        fams: set[str] | None = None
        with torch.no_grad():
            if op.sdpa and backend == "torch":
                out, fams = _sdpa_families(lambda: fn(t_in, shape))
                extra["sdpa_kernels"] = sorted(fams)
            else:
                out = fn(t_in, shape)
        reason = None
        devs = _devices(out)
        if devs and devs != {torch.device(device).type}:
            reason = f"output on {sorted(devs)}, expected {device}"
        elif fams is not None:
            want = expected_sdpa(device, dtype)
            if want is not None and not fams & want:
                reason = (f"SDPA ran {sorted(fams) or 'no known kernel'}; expected one of {sorted(want)} on "
                          f"{device}/{dtype}")
        return _to_numpy(out), reason, extra
    if backend in ORT_BACKENDS:
        from perfsuite.measure.ops import ort_adapter

        if dtype not in registry.ORT_DTYPES:
            raise NotImplementedError(f"{dtype} feeds are not expressible from numpy")
        if op.onnx is None or op.onnx_feeds is None:
            raise NotImplementedError(f"{op.name} has no ONNX graph")
        sess = ort_session(op.name, backend, dtype, shape)
        outs = sess.run(None, op.onnx_feeds(inputs, shape, dtype))
        pl = ort_adapter.placement(sess, backend)
        extra["placement"] = asdict(pl)
        return op.onnx_post(outs, shape), pl.fallback_reason(), extra
    raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")


def short_error(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]  # after strip(), the first line is the first non-blank one
    return f"{type(exc).__name__}: {first[:300]}"


def evaluate(op_name: str, backend: str, dtype: str, shape: Shape, seed: int | None = None,
             device: str = "cpu") -> OpResult:
    """Run and classify one cell in this process (never raises for a backend failure)."""
    op = registry.get(op_name)
    seed = seed_for(op_name, dtype, shape) if seed is None else seed
    t0 = time.perf_counter()
    res = OpResult(op_name, backend, dtype, shape.as_dict(), seed, "pass")
    try:
        inputs, ref = _reference(op_name, dtype, shape, seed)
    except Exception as exc:  # a reference bug is ours, not the backend's: report it loudly
        raise RuntimeError(f"reference of {op_name} failed at {shape.describe()}: {exc}") from exc
    try:
        out, fallback, extra = run_backend(op, backend, dtype, shape, inputs, device)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        res.status, res.detail = "unsupported", short_error(exc)
        if backend == "torch-compile" and "recompile" in str(exc).lower() and "limit" in str(exc).lower():
            res.status = "fallback"  # dynamo would have run this eagerly
            res.detail = "torch.compile hit its recompile limit (dynamo falls back to eager): " + res.detail
        res.extra["traceback_tail"] = traceback.format_exc().splitlines()[-3:]
        res.seconds = time.perf_counter() - t0
        return res
    res.extra.update(extra)
    try:
        cmp = op.check(out, ref, dtype, inputs)
    except Exception as exc:  # unexpected output structure
        res.status, res.detail = "wrong", f"output not comparable: {short_error(exc)}"
        res.max_ratio = float("inf")
        res.seconds = time.perf_counter() - t0
        return res
    res.max_ratio, res.max_abs_err, res.nan_where_finite = cmp.max_ratio, cmp.max_abs_err, cmp.nan_where_finite
    if not cmp.ok:
        res.status = "wrong"
        what = f"{cmp.nan_where_finite} NaN/Inf where the reference is finite, " if cmp.nan_where_finite else ""
        res.detail = (f"{what}{cmp.bad_elements}/{cmp.numel} element(s) out of tolerance, max |err| "
                      f"{cmp.max_abs_err:.3g} = {cmp.max_ratio:.3g} x tol at index {cmp.worst_index}")
    elif fallback:
        res.status, res.detail = "fallback", fallback
    res.seconds = time.perf_counter() - t0
    return res
