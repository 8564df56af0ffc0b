"""vLLM as its users run it: ``vllm.LLM(...).generate(...)`` with vLLM's defaults (backend name ``vllm-llm``;
docs/recipes.md, "vLLM as its users run it"). One timed call = one generation of the batch, the way ``vllm bench
latency`` times it; the only departures from ``vllm.LLM()``'s defaults are in
:func:`~perfsuite.measure.backends.vllm_engine_args.llm_engine_args`. ``generate()`` returns when the batch is done,
so only whole generations are timed (a :class:`~perfsuite.measure.backends.base.WholeBackend`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfsuite.facts.cells import Cell
from perfsuite.measure.backends.base import WholeBackend
from perfsuite.measure.backends.vllm_common import VllmEngineError
from perfsuite.measure.backends.vllm_engine import EngineBackend
from perfsuite.measure.backends.vllm_engine_args import llm_engine_args


class VllmLlmBackend(EngineBackend, WholeBackend):
    def __init__(self, cell: Cell, cache_dir: Path | None = None) -> None:
        super().__init__(cell, cache_dir)
        self.llm: Any = None
        self._sp: Any = None

    def metric_unavailable(self, metric: str) -> str | None:
        """Why this backend cannot time ``metric`` (``ttft``/``tpot``/``e2el``), or None."""
        if metric in self.timed_metrics:
            return None
        return (f"{self.name} times whole LLM.generate() calls with vLLM's defaults (async scheduling, engine-core "
                f"process): no host-side {metric.upper()} exists there; the vllm backend's step loop measures it")

    def engine_args(self, model_path: str | None = None) -> dict[str, Any]:
        return llm_engine_args(self.cell, model_path)

    def _make(self, kwargs: dict[str, Any]) -> Any:
        from vllm import LLM

        self.llm = LLM(**kwargs)
        return self.llm.llm_engine

    def _describe(self, cfg: Any) -> dict[str, Any]:
        from vllm import SamplingParams

        # As vllm bench latency asks: ignore_eos + max_tokens (no min_tokens, no per-request seed: both add work
        # to every step in vLLM's sampler); generate() checks that exactly new_tokens came back.
        self._sp = SamplingParams(temperature=float(self.cell.option("temperature", 0.0)), top_p=1.0,
                                  max_tokens=self.cell.scenario.new_tokens, ignore_eos=True, detokenize=False)
        return {
            "engine_api": "vllm.LLM.generate (vLLM's defaults)",
            "timed_metrics": list(self.timed_metrics),
            "sampling": {"temperature": self._sp.temperature, "max_tokens": self._sp.max_tokens,
                         "ignore_eos": True},
            "resolved": {
                "enable_prefix_caching": bool(cfg.cache_config.enable_prefix_caching),
                "max_num_seqs": cfg.scheduler_config.max_num_seqs,
                "compilation_mode": str(getattr(cfg.compilation_config, "mode", None)),
            },
        }

    def close(self) -> None:
        self.llm = None  # its reference to the engine goes first, so shutdown_engine can free it
        super().close()

    def generate(self, prompts: list[list[int]], new_tokens: int | None = None) -> list[list[int]]:
        """One ``LLM.generate`` call for the batch (what one timed round is); the generated token ids. The sampling
        parameters are built at load for the cell's ``new_tokens``; another count is refused."""
        from vllm.inputs import TokensPrompt

        if self.llm is None:
            raise VllmEngineError("load() first")
        if new_tokens is not None and new_tokens != self.cell.scenario.new_tokens:
            raise VllmEngineError(f"generate(new_tokens={new_tokens}): this cell generates exactly "
                                  f"{self.cell.scenario.new_tokens} tokens (its scenario's new_tokens)")
        with self._procs.watch():
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], self._sp,
                                     use_tqdm=False)
        tokens = [list(o.outputs[0].token_ids) for o in outs]
        n = self.cell.scenario.new_tokens
        if [len(t) for t in tokens] != [n] * len(prompts):
            raise VllmEngineError(f"LLM.generate returned {[len(t) for t in tokens]} tokens per request, expected "
                                  f"exactly {n} (ignore_eos, min_tokens = max_tokens = {n})")
        return tokens
