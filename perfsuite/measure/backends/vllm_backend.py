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

Engine core placement (cell option ``engine_core``, default ``inproc``: one ``step()`` is exactly one engine
iteration, synchronous with the host; the model runs in worker processes either way):
:func:`~perfsuite.measure.backends.vllm_engine_args.engine_core_mode`. Tensor parallelism: one worker process per
rank (on the CPU, bound by :func:`~perfsuite.measure.backends.vllm_engine_args.cpu_bind_plan`). An AWQ cell of a
float checkpoint runs the checkpoint :mod:`perfsuite.measure.quant.awq` builds (``info()["awq"]``). The engine's
processes: :mod:`perfsuite.measure.backends.vllm_engine`. vLLM's own per-request statistics of the last finished
generation: :meth:`VllmBackend.vllm_request_stats`, next to ours (:meth:`VllmBackend.request_timings`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.facts.cells import Cell
from perfsuite.measure.backends.base import StepBackend, StepResult
from perfsuite.measure.backends.vllm_common import VllmEngineError, VllmWorkerDied
from perfsuite.measure.backends.vllm_engine import EngineBackend
from perfsuite.measure.backends.vllm_engine_args import build_engine_args, engine_core_mode

__all__ = ["VllmBackend", "VllmEngineError", "VllmWorkerDied"]

MAX_IDLE_STEPS = 1000  # engine steps without any new token before we call the engine stuck


@dataclass
class _Gen:
    """One generation in flight: B requests added together."""

    ids: list[str]
    t_add: list[float]
    tokens: list[list[int]]
    t_tokens: list[list[float]]  # host clock at which each token came back
    finished: list[bool]
    outputs: dict[str, Any] = field(default_factory=dict)  # request id -> final RequestOutput
    released: bool = False


class VllmBackend(EngineBackend, StepBackend):
    def __init__(self, cell: Cell, cache_dir: Path | None = None) -> None:
        super().__init__(cell, cache_dir)
        self._gen: _Gen | None = None
        self._gen_counter = 0
        self._finished_stats: dict[str, Any] = {}  # request id -> vLLM FinishedRequestStats
        self._last_ours: list[dict[str, Any]] | None = None
        self._last_vllm: list[dict[str, Any]] | None = None

    def engine_args(self, model_path: str | None = None) -> dict[str, Any]:
        return build_engine_args(self.cell, model_path)

    def _make(self, kwargs: dict[str, Any]) -> Any:
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        self.engine = LLMEngine.from_engine_args(EngineArgs(**kwargs), stat_loggers=[self._stat_logger_factory()])
        self._procs.collect(self.engine)
        # One-off RPC that the first add_request() would otherwise pay inside the first TTFT.
        with self._procs.watch():
            self.engine.get_supported_tasks()
        return self.engine

    def _load(self) -> None:
        super()._load()
        sched = self.engine.vllm_config.scheduler_config
        if sched.async_scheduling and not self.cell.option("async_scheduling", False):
            raise VllmEngineError("vLLM turned async scheduling on; the step-loop timing needs it off")

    def _describe(self, cfg: Any) -> dict[str, Any]:
        return {
            "engine_api": "vllm.v1.engine.llm_engine.LLMEngine (add_request/step)",
            "engine_core": engine_core_mode(self.cell),
            "resolved": {
                "kv_cache_memory_bytes": getattr(cfg.cache_config, "kv_cache_memory_bytes", None),
                "num_gpu_blocks": getattr(cfg.cache_config, "num_gpu_blocks", None),
                "device": str(cfg.device_config.device_type),
            },
        }

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
            with contextlib.suppress(Exception):
                self.release(self._gen)
        self._gen = None
        super().close()

    def _sampling_params(self, **over: Any) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        n = self.cell.scenario.new_tokens
        kw: dict[str, Any] = dict(temperature=0.0, max_tokens=n, min_tokens=n, ignore_eos=True, detokenize=False,
                                  output_kind=RequestOutputKind.DELTA, seed=self.cell.seed)
        return SamplingParams(**(kw | over))

    def prefill(self, prompts: list[list[int]]) -> StepResult:
        from vllm.inputs import TokensPrompt

        if self.engine is None:
            raise VllmEngineError("load() first")
        if self._gen is not None and not self._gen.released:
            self.release(self._gen)
        self._gen_counter += 1
        g = _Gen([f"g{self._gen_counter}-r{i}" for i in range(len(prompts))], [], [[] for _ in prompts],
                 [[] for _ in prompts], [False] * len(prompts))
        self._gen = g
        sp = self._sampling_params()
        with self._procs.watch():
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
        with self._procs.watch():
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
                    i = g.ids.index(o.request_id)
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
                d.update(e2el_s=fin.e2e_latency, mean_time_per_output_token_s=fin.mean_time_per_output_token)
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
        with self._procs.watch():
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
            with self._procs.watch():
                self.engine.abort_request(unfinished)
                idle = 0
                while self.engine.has_unfinished_requests() and idle < MAX_IDLE_STEPS:
                    self.engine.step()
                    idle += 1
        for rid in g.ids:
            self._finished_stats.pop(rid, None)
        if self._gen is g:
            self._gen = None

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
