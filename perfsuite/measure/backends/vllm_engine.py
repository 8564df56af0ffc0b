"""The processes a vLLM engine starts, and the part of both vLLM backends that looks after them.

Everything an engine starts is a child of this process. :class:`EngineProcesses` records them around the start,
turns vLLM's follow-up errors after a worker died (``RuntimeError: cancelled``, ``collective_rpc should not be
called on follower node``, ``EngineDeadError``) into :class:`VllmWorkerDied` naming the process and its exit signal
or code, and :func:`shutdown_engine` waits for all of them (killing what vLLM's shutdown left) so none outlives a
cell. :class:`EngineBackend` starts an engine under the cell's environment with its processes recorded.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfsuite.facts.cells import Cell
from perfsuite.machine import memory
from perfsuite.measure.backends.base import MemoryStats
from perfsuite.measure.backends.vllm_common import (
    VllmEngineError,
    VllmWorkerDied,
    describe_exit,
    exc_message,
    fresh_vllm_envs,
    model_path_for,
    platform_reason,
    validate_with_vllm,
    vllm_env,
)
from perfsuite.measure.backends.vllm_engine_args import engine_env, rpc_socket_dir

DEATH_GRACE_S = 2.0  # after an engine error, how long a dying worker may take to be seen dead
SHUTDOWN_WAIT_S = 15.0


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
        seen = {h.pid for h in self.handles}
        out = [describe_exit(h.name, h.pid, code) for h in self.handles if (code := h.exitcode) is not None]
        out += [describe_exit("vLLM process", pid, None) for pid in self.pids if pid not in seen and not _running(pid)]
        return out

    def alive(self) -> list[int]:
        return [pid for pid in self.pids if _running(pid)]

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Turn any engine error that follows the death of one of these processes into :class:`VllmWorkerDied`."""
        try:
            yield
        except VllmEngineError:
            raise
        except Exception as exc:
            deadline = time.monotonic() + DEATH_GRACE_S
            while not (dead := self.dead()) and time.monotonic() < deadline:
                time.sleep(0.05)
            if dead:
                raise VllmWorkerDied(
                    f"vLLM worker died: {'; '.join(dead)}; the engine cannot continue this cell (vLLM then "
                    f"raised {type(exc).__name__}: {exc_message(exc)})") from exc
            raise

    def reset_peak_rss(self) -> None:
        memory.reset_peak_rss()
        for pid in self.pids:
            memory.reset_peak_rss(pid)

    def peak_rss_bytes(self) -> int | None:
        """Peak RSS of this process plus the engine's live processes (the model lives in the workers)."""
        total = (memory.peak_rss_bytes() or 0) + sum(memory.peak_rss_bytes(pid) or 0 for pid in self.alive())
        return total or None

    def reap(self) -> list[int]:
        """Wait for every recorded process to end; kill (and report) those still running after SHUTDOWN_WAIT_S."""
        import psutil

        self.collect(None)  # children started after load() recorded them (a TP rank spawned late)
        procs = []
        for pid in self.pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                procs.append(psutil.Process(pid))
        _, alive = psutil.wait_procs(procs, timeout=SHUTDOWN_WAIT_S)
        for p in alive:  # vLLM's shutdown left them: end them (they are ours, started by the engine)
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        for h in self.handles:  # let multiprocessing collect its own children (no zombies left)
            with contextlib.suppress(Exception):
                h.join(timeout=0)
        return [p.pid for p in alive]


def _process_handles(engine: Any) -> list[Any]:
    """vLLM's ``multiprocessing`` handles on its processes: model workers of an in-process engine core
    (``InprocClient.engine_core.model_executor.workers[i].proc``) or the engine-core process(es) of a
    multiprocess client (``client.resources.engine_manager.processes``)."""
    client = getattr(engine, "engine_core", None)
    executor = getattr(getattr(client, "engine_core", None), "model_executor", None)
    workers = getattr(executor, "workers", None) or []
    handles = [w.proc for w in workers if getattr(w, "proc", None) is not None]
    manager = getattr(getattr(client, "resources", None), "engine_manager", None)
    handles.extend(getattr(manager, "processes", None) or [])
    return handles


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (ended, not yet reaped)."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _is_resource_tracker(p: Any) -> bool:
    """multiprocessing's resource tracker lives for the whole Python process, not for one engine."""
    try:
        return any("resource_tracker" in part for part in p.cmdline())
    except Exception:
        return False


def shutdown_engine(owner: Any, procs: EngineProcesses) -> list[int]:
    """Shut ``owner.engine`` (an ``LLMEngine``) down and wait for its processes; returns the pids that had to be
    killed. The owner's reference goes here, so the engine is freed before the wait (a caller's local would keep it)."""
    engine, owner.engine = owner.engine, None
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


class EngineBackend:
    """What both vLLM backends do around their engine: start it under the cell's environment recording the processes
    it starts, end them if ``load()`` fails after the start or at ``close()``, and report memory over all of them."""

    def __init__(self, cell: Cell, cache_dir: Path | None = None) -> None:
        self.cell = cell
        self.name = cell.backend
        self.engine: Any = None  # the LLMEngine
        self._procs = EngineProcesses()
        self._info: dict[str, Any] = {}
        self._rpc_dir: str | None = None

    def load(self) -> None:
        """Start the engine. If anything fails after processes were started, they are ended before re-raising."""
        self._procs.mark()
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def engine_args(self, model_path: str | None = None) -> dict[str, Any]:  # pragma: no cover - each its own
        raise NotImplementedError

    def _make(self, kwargs: dict[str, Any]) -> Any:  # pragma: no cover - each its own
        """Build the engine (returns the ``LLMEngine``)."""
        raise NotImplementedError

    def _describe(self, cfg: Any) -> dict[str, Any]:  # pragma: no cover - each its own
        """After the start: the backend's own facts for ``info()``; its ``resolved`` keys join the shared ones."""
        raise NotImplementedError

    def availability(self) -> str | None:
        """Why the cell cannot run on this install, or None. The cell's option errors raise here (a usage error,
        not a skip), before vLLM sees anything."""
        if reason := platform_reason(self.cell):
            return reason
        self.engine_args()
        return validate_with_vllm(self.cell, self.engine_args)

    def _load(self) -> None:
        """``_make()`` under the cell's environment, timed; the engine's processes are recorded even when it fails
        half-way, so ``close()`` can end them."""
        import vllm

        path, awq_info = model_path_for(self.cell)
        kwargs, env = self.engine_args(path), engine_env(self.cell)
        # vLLM names a socket per engine link in VLLM_RPC_BASE_PATH (the temp folder by default) and never removes
        # them: a folder of this engine's, removed at close()
        self._rpc_dir = rpc_socket_dir()
        t0 = time.perf_counter()
        try:
            with vllm_env({**env, "VLLM_RPC_BASE_PATH": self._rpc_dir}):
                self.engine = self._make(kwargs)
        finally:
            self._procs.collect(self.engine)
        start_s = time.perf_counter() - t0
        cfg = self.engine.vllm_config
        resolved = {  # what both backends report; _describe adds its own keys
            "dtype": str(cfg.model_config.dtype).removeprefix("torch."),
            "max_model_len": cfg.model_config.max_model_len,
            "async_scheduling": bool(cfg.scheduler_config.async_scheduling),
            "chunked_prefill": bool(cfg.scheduler_config.enable_chunked_prefill),
            "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
            "enforce_eager": bool(cfg.model_config.enforce_eager),
            "executor": cfg.parallel_config.distributed_executor_backend,
            "tensor_parallel_size": cfg.parallel_config.tensor_parallel_size,
            "quantization": cfg.model_config.quantization,
        }
        described = self._describe(cfg)
        self._info = {"vllm": vllm.__version__, "engine_start_s": start_s, **described,
                      "engine_args": {k: v for k, v in kwargs.items() if k != "model"}, "engine_env": env,
                      "resolved": {**resolved, **described.get("resolved", {})}, "engine_pids": list(self._procs.pids)}
        if awq_info is not None:
            self._info["awq"] = awq_info

    def close(self) -> None:
        self._info["killed_leftover_pids"] = shutdown_engine(self, self._procs)
        if self._rpc_dir:
            shutil.rmtree(self._rpc_dir, ignore_errors=True)

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def engine_processes_alive(self) -> list[int]:
        """Pids of the processes this backend's engine started that still run."""
        return self._procs.alive()

    def reset_peak_memory(self) -> None:
        self._procs.reset_peak_rss()

    def memory_stats(self) -> MemoryStats:
        return MemoryStats(peak_rss_bytes=self._procs.peak_rss_bytes())
