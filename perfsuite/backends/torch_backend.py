"""PyTorch through transformers: eager (``torch``) and ``torch.compile`` (``torch-compile``).

The same code runs on ROCm: a HIP build of torch exposes the GPU as ``cuda`` (``torch.version.hip`` is set).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from perfsuite import memory
from perfsuite.backends.base import MemoryStats, StepResult
from perfsuite.cells import Cell

INJECT_ENV = "PERFSUITE_INJECT_DECODE_SLOWDOWN"


@dataclass
class _State:
    past: Any
    last: torch.Tensor  # [B] last generated token, on the device


class TorchBackend:
    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.name = cell.backend
        self.compile = cell.backend == "torch-compile"
        self.device = torch.device(cell.device)
        self.dtype = getattr(torch, cell.dtype)
        self.model: Any = None
        # A/A and injected-regression experiments (perfsuite calibrate): extra real work in each decode step,
        # proportional to the step's own duration. 0 = off; never set by the benchmark matrix.
        self.inject = float(os.environ.get(INJECT_ENV, "0") or 0)

    def availability(self) -> str | None:
        if self.cell.device == "cuda" and not torch.cuda.is_available():
            build = f"HIP {torch.version.hip}" if torch.version.hip else (
                f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build")
            return f"torch {torch.__version__} ({build}) sees no GPU: torch.cuda.is_available() is False"
        if self.cell.quantization != "none":
            return f"the torch backend has no {self.cell.quantization} path (use onnxruntime-* or vllm cells)"
        if self.cell.tensor_parallel_size != 1:
            return "the torch backend runs on one device; tensor parallelism is a vllm cell"
        if self.compile and self.cell.device == "cpu" and not _have_compiler():
            return "torch.compile on the CPU needs a C++ compiler (inductor): install gcc or g++"
        return None

    def load(self) -> None:
        from transformers import AutoModelForCausalLM

        assert self.cell.model_dir is not None
        model = AutoModelForCausalLM.from_pretrained(
            self.cell.model_dir, dtype=self.dtype, attn_implementation=self.cell.attn_implementation,
            use_safetensors=True, local_files_only=True, trust_remote_code=False)
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]
        if self.compile:
            # dynamic=True: one graph for every context length instead of a recompile per decode step.
            self.model.forward = torch.compile(self.model.forward, dynamic=True,
                                               mode=self.cell.option("compile_mode", None))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def prefill(self, prompts: list[list[int]]) -> StepResult:
        ids = torch.tensor(prompts, dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids, use_cache=True)
        nxt = out.logits[:, -1, :].argmax(dim=-1)
        tokens = nxt.tolist()  # device -> host copy: the work is finished when this returns
        return StepResult(tokens, _State(out.past_key_values, nxt))

    @torch.inference_mode()
    def decode(self, state: _State) -> StepResult:
        t0 = time.perf_counter() if self.inject else 0.0
        out = self.model(input_ids=state.last[:, None], past_key_values=state.past, use_cache=True)
        nxt = out.logits[:, -1, :].argmax(dim=-1)
        tokens = nxt.tolist()
        if self.inject:
            self._burn_for(self.inject * (time.perf_counter() - t0))
        return StepResult(tokens, _State(out.past_key_values, nxt))

    @staticmethod
    def _burn_for(seconds: float) -> int:
        """Real work on this thread (integer arithmetic) for ``seconds``: a regression, not an edited number.

        Host-side arithmetic rather than torch ops: extra matmuls disturb the intra-op thread pool and slowed the
        step by 7-23 % for a 5 % request; this adds what is asked (measured +4.6 % / +10.5 % for 0.05 / 0.10).
        """
        end = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < end:
            n += 1
        return n

    def release(self, state: Any) -> None:
        del state

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
        if self.inject:
            d["injected_decode_slowdown"] = self.inject
        return d

    def close(self) -> None:
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _have_compiler() -> bool:
    import shutil

    return any(shutil.which(c) for c in ("g++", "c++", "clang++", "gcc", "cc"))
