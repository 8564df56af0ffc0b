"""PyTorch through transformers: eager (``torch``) and ``torch.compile`` (``torch-compile``).

The same code runs on ROCm: a HIP build of torch exposes the GPU as ``cuda`` (``torch.version.hip`` is set).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from perfsuite.facts.cells import Cell
from perfsuite.machine import memory
from perfsuite.measure.backends.base import MemoryStats, StepBackend, StepResult


@dataclass
class _State:
    past: Any
    last: torch.Tensor  # [B] last generated token, on the device


class TorchBackend(StepBackend):
    def __init__(self, cell: Cell, cache_dir: Path | None = None) -> None:
        self.cell = cell
        self.name = cell.backend
        self.compile = cell.backend == "torch-compile"
        self.device = torch.device(cell.device)
        self.dtype = getattr(torch, cell.dtype)
        self.model: Any = None

    def availability(self) -> str | None:
        if self.cell.device == "cuda" and not torch.cuda.is_available():
            build = f"HIP {torch.version.hip}" if torch.version.hip else (
                f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build")
            return f"torch {torch.__version__} ({build}) sees no GPU: torch.cuda.is_available() is False"
        if self.cell.quantization != "none":
            return f"the torch backend has no {self.cell.quantization} path (use onnxruntime-* or vllm cells)"
        if self.cell.tensor_parallel_size != 1:
            return "the torch backend runs on one device; tensor parallelism is a vllm cell"
        from perfsuite.machine import kernel_probes

        return kernel_probes.unmet(self.cell)  # torch-compile on the CPU: inductor's C++ compiler

    def load(self) -> None:
        from perfsuite.measure.backends.onnxruntime.tracing import load_torch_model

        assert self.cell.model_dir is not None
        model = load_torch_model(self.cell.model_dir, self.cell.dtype, self.cell.attn_implementation)
        self.model = model.to(self.device)
        if self.compile:
            # dynamic=True: one graph for every context length instead of a recompile per decode step.
            self.model.forward = torch.compile(self.model.forward, dynamic=True,
                                               mode=self.cell.option("compile_mode", None))

    def prefill(self, prompts: list[list[int]]) -> StepResult:
        return self._step(torch.tensor(prompts, dtype=torch.long, device=self.device), None)

    def decode(self, state: _State) -> StepResult:
        return self._step(state.last[:, None], state.past)

    @torch.inference_mode()
    def _step(self, ids: torch.Tensor, past: Any) -> StepResult:
        out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
        nxt = out.logits[:, -1, :].argmax(dim=-1)
        tokens = nxt.tolist()  # device -> host copy: the work is finished when this returns
        return StepResult(tokens, _State(out.past_key_values, nxt))

    def reset_peak_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        memory.reset_peak_rss()

    def memory_stats(self) -> MemoryStats:
        if self.device.type == "cuda":
            return MemoryStats(peak_allocated_bytes=torch.cuda.max_memory_allocated(self.device),
                               peak_reserved_bytes=torch.cuda.max_memory_reserved(self.device),
                               peak_rss_bytes=memory.peak_rss_bytes())
        return MemoryStats(peak_rss_bytes=memory.peak_rss_bytes())

    def info(self) -> dict[str, Any]:
        import transformers

        d: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                             "attn_implementation": self.cell.attn_implementation, "compile": self.compile,
                             "threads": torch.get_num_threads()}
        if self.device.type == "cuda":
            d.update(device_name=torch.cuda.get_device_name(self.device), hip=torch.version.hip,
                     cuda=torch.version.cuda)
        return d

    def close(self) -> None:
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

