"""How close a cell runs to the hardware's limit.

Decode is memory-bound: each step reads every weight once (the embedding table only for the B rows it gathers,
unless it is tied to the LM head, which reads it whole) and the KV cache of the current context. That byte count
divided by TPOT is the achieved bandwidth; the fractions of (a) the bandwidth measured on this device when the run
starts (a large copy) and (b) the datasheet figure say how much headroom is left. Prefill is compute-bound:
achieved FLOP/s (useful matmul + attention FLOPs / TTFT) against a measured matmul peak and the datasheet peak.

Conventions, so the numbers can be checked by hand:

* weights: every linear layer, norm and the LM head once per step; the embedding lookup reads B rows.
* KV cache: K and V of every layer for the context, ``2 * layers * kv_heads * head_dim * context * batch`` elements
  (GQA: kv_heads < heads). The decode test walks contexts prompt+1 ... prompt+new-1, so the step at the *mean*
  context (prompt + new/2) has the mean byte count. Activations (B x hidden per layer) are left out: < 0.1 %.
* quantized weights: int8 -> 1 byte per linear weight; AWQ/GPTQ 4-bit with group-128 scales and zeros ->
  4 + 20/128 bits per linear weight; the embedding stays in the cell's dtype (AWQ also keeps the LM head).
* the copy kernel moves 2 x N bytes for an N-byte copy (read + write: the STREAM convention).
* datasheet bandwidth is per device as the runtime sees it: an MI250X shows up as two devices (GCDs), each with
  half the package's 3.2 TB/s.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from perfsuite.machine.roofline.datasheet import DATASHEET, DeviceSpec, datasheet

__all__ = ["DATASHEET", "DeviceSpec", "ModelShape", "annotate", "datasheet", "measure_peaks"]

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "float8": 1, "fp8": 1}

@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    gated_mlp: bool  # llama/mistral/qwen: gate+up+down; opt/gpt2: fc1+fc2
    bias: bool
    layernorm_bias: bool

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ModelShape:
        """From a Hugging Face ``config.json`` dict (llama, mistral, qwen2, opt, gpt2-style keys)."""
        mt = str(cfg.get("model_type", "")).lower()
        hidden = int(cfg.get("hidden_size") or cfg.get("n_embd") or cfg["d_model"])
        layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg["num_layers"])
        heads = int(cfg.get("num_attention_heads") or cfg.get("n_head") or cfg["num_heads"])
        kv = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        inter = int(cfg.get("intermediate_size") or cfg.get("ffn_dim") or cfg.get("n_inner") or 4 * hidden)
        opt_like = mt in ("opt", "gpt2", "gpt_neox", "gptj", "bloom", "falcon")
        tied = bool(cfg.get("tie_word_embeddings", opt_like or mt not in ("llama", "mistral", "mixtral")))
        bias = bool(cfg.get("enable_bias", opt_like) or cfg.get("attention_bias", False))
        return cls(hidden, layers, heads, kv, head_dim, inter, int(cfg["vocab_size"]), tied,
                   gated_mlp=not opt_like, bias=bias, layernorm_bias=opt_like)

    def attn_params(self) -> int:
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        w = self.hidden * q_out + 2 * self.hidden * kv_out + q_out * self.hidden
        return w + ((q_out + 2 * kv_out + self.hidden) if self.bias else 0)

    def mlp_params(self) -> int:
        mats = 3 if self.gated_mlp else 2
        w = mats * self.hidden * self.intermediate
        return w + ((self.intermediate * (mats - 1) + self.hidden) if self.bias else 0)

    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden * (2 if self.layernorm_bias else 1)

    def linear_params(self) -> int:
        """Weights of the matmuls in the decoder layers (what quantization shrinks), without the LM head."""
        return self.layers * (self.attn_params() + self.mlp_params())

    def total_params(self) -> int:
        embedding = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else embedding
        return self.linear_params() + self.layers * self.norm_params_per_layer() + self.hidden + embedding + head


QUANT_BITS = {"none": None, "int8-dynamic": 8.0, "int8": 8.0, "awq": 4 + 20 / 128, "gptq": 4 + 20 / 128}


def weight_bytes_per_step(shape: ModelShape, dtype: str, batch: int = 1, quantization: str = "none") -> float:
    """Bytes of weights one decode step reads."""
    eb = DTYPE_BYTES[dtype]
    bits = QUANT_BITS.get(quantization)
    if quantization not in QUANT_BITS:
        raise ValueError(f"quantization {quantization!r}: known {', '.join(QUANT_BITS)}")
    linear_b = shape.linear_params() * (bits / 8 if bits else eb)
    head_bits = bits if quantization.startswith("int8") else None  # ORT dynamic int8 quantizes the LM head MatMul
    head_b = shape.vocab * shape.hidden * (head_bits / 8 if head_bits else eb)
    norms_b = (shape.layers * shape.norm_params_per_layer() + shape.hidden) * eb
    gather_b = 0 if shape.tied_embeddings else batch * shape.hidden * eb
    return linear_b + head_b + norms_b + gather_b


def kv_cache_bytes(shape: ModelShape, dtype: str, batch: int, context: float) -> float:
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * context * batch * DTYPE_BYTES[dtype]


def decode_flops_per_step(shape: ModelShape, batch: int, context: float) -> float:
    matmul = 2 * (shape.linear_params() + shape.vocab * shape.hidden) * batch
    attn = 4 * shape.layers * shape.heads * shape.head_dim * context * batch
    return matmul + attn


def prefill_flops(shape: ModelShape, batch: int, prompt: int) -> float:
    """Useful FLOPs of one prefill: every linear layer for B x P tokens, the LM head for the last token of each
    sequence, causal attention (QK^T and PV over P(P+1)/2 query-key pairs)."""
    matmul = 2 * shape.linear_params() * batch * prompt + 2 * shape.vocab * shape.hidden * batch
    attn = 4 * shape.layers * shape.heads * shape.head_dim * batch * prompt * (prompt + 1) / 2
    return matmul + attn


# ----------------------------------------------------------------------------------------------- measuring peaks
@dataclass(frozen=True)
class Measured:
    value: float  # best of the repeats (bytes/s or FLOP/s)
    median: float
    nbytes: int
    repeats: int
    method: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _available_memory_bytes() -> int | None:
    with contextlib.suppress(OSError), open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def cpu_copy_nbytes(llc_bytes: int | None = None) -> int:
    """One buffer of the copy: twice the last-level cache (the pair then is 4x it), 256 MiB .. 1 GiB, and never more
    than an eighth of the available memory."""
    if llc_bytes is None:
        from perfsuite.machine.roofline.cache import llc_bytes_here

        llc_bytes = llc_bytes_here() or 32 * 2**20
    n = min(max(2 * llc_bytes, 256 * 2**20), 2**30)
    avail = _available_memory_bytes()
    if avail:
        n = min(n, avail // 8)
    return max(n - n % 4096, 4096)


def measure_copy_bandwidth(device: str = "cpu", nbytes: int | None = None, repeats: int = 5) -> Measured:
    """Device memory bandwidth from a large copy (``dst.copy_(src)``; torch's copy uses all intra-op threads on the
    CPU). Best of ``repeats`` after one warm-up, counting 2 x nbytes per copy."""
    import torch

    if device == "cpu":
        nbytes = nbytes or cpu_copy_nbytes()
    else:
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        nbytes = nbytes or int(min(2 * 2**30, max(256 * 2**20, free // 8)))
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    rates = []
    for i in range(repeats + 1):
        if device == "cpu":
            t0 = time.perf_counter()
            dst.copy_(src)
            dt = time.perf_counter() - t0
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            dt = start.elapsed_time(end) / 1e3
        if i > 0:  # the first copy pays page faults (CPU) / lazy allocation
            rates.append(2 * n * 4 / dt)
    del src, dst
    return Measured(max(rates), statistics.median(rates), n * 4, repeats,
                    f"torch copy_ of 2 x {n * 4 / 2**20:.0f} MiB float32 on {device} ({torch.get_num_threads()} threads)"
                    if device == "cpu" else f"torch copy_ of {n * 4 / 2**20:.0f} MiB on {device}, CUDA/HIP events")


def measure_matmul_flops(device: str = "cpu", dtype: str = "float32", n: int | None = None,
                         repeats: int = 3) -> Measured:
    """A square matmul's FLOP/s (2 n^3 per product): the measured compute peak the prefill is compared with."""
    import torch

    n = n or (1024 if device == "cpu" else 8192)
    a = torch.randn(n, n, dtype=getattr(torch, dtype), device=device)
    b = torch.randn(n, n, dtype=getattr(torch, dtype), device=device)
    rates = []
    for i in range(repeats + 1):
        if device != "cpu":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        torch.matmul(a, b)
        if device != "cpu":
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        if i > 0:
            rates.append(2 * n**3 / dt)
    return Measured(max(rates), statistics.median(rates), 3 * n * n * DTYPE_BYTES[dtype], repeats,
                    f"torch.matmul {n}x{n} {dtype} on {device}")


def measure_peaks(device: str, dtype: str, llc_bytes: int | None = None) -> dict[str, Any]:
    """What the lead's run start records once per device: copy bandwidth and matmul peak; on the CPU also the LLC
    size and the copy bandwidth within it (perfsuite.machine.roofline.cache: the reference of cache-resident cells)."""
    from perfsuite.machine.roofline import cache as roofline_cache

    bw = measure_copy_bandwidth(device)
    mm = measure_matmul_flops(device, dtype if device != "cpu" else "float32")
    cache = roofline_cache.peaks(llc_bytes) if device == "cpu" else {}
    return {"copy_bandwidth_bytes_per_s": bw.value, "copy_bandwidth": bw.as_dict(),
            "matmul_flops_per_s": mm.value, "matmul": mm.as_dict(), **cache, "pid": os.getpid()}


# ------------------------------------------------------------------------------------------------------ per cell
def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or not b or math.isnan(a):
        return None
    return a / b


def annotate(cell: Any, model_config: dict[str, Any], aggregates: dict[str, Any],
             bandwidth_bytes_per_s: float | None, *, device_name: str | None = None,
             matmul_flops_per_s: float | None = None, llc_bytes: int | None = None,
             cache_bandwidth_bytes_per_s: float | None = None) -> dict[str, Any]:
    """``extra_info`` keys of one cell: decode bytes/step, achieved bandwidth and its fraction of the measured and
    datasheet bandwidth (from ``median_itl_ms``, else ``median_tpot_ms``), and prefill FLOP/s against the peaks
    (from ``median_ttft_ms``).

    ``cell`` is a :class:`perfsuite.facts.cells.Cell` (its scenario, dtype, quantization, tensor_parallel_size are read).
    Keys whose inputs are missing are left out; ratios without a reference are None. A CPU cell whose working set
    fits ``llc_bytes`` is cache-resident and compared with ``cache_bandwidth_bytes_per_s``; no share is above 1
    (perfsuite.machine.roofline.cache).
    """
    from perfsuite.machine.roofline import cache as roofline_cache

    shape = ModelShape.from_config(model_config)
    sc = cell.scenario
    tp = max(1, int(getattr(cell, "tensor_parallel_size", 1)))
    spec = datasheet(device_name) if getattr(cell, "device", "cpu") != "cpu" else None
    out: dict[str, Any] = {"model_params": shape.total_params()}
    if spec:
        out["datasheet_device"] = spec.name
        out["datasheet_source"] = spec.source
    # The median decode step (robust to the outliers a shared machine adds to per-generation means); its context
    # is the median of a uniform walk, i.e. the mean context the byte count uses.
    tpot = aggregates.get("median_itl_ms") or aggregates.get("median_tpot_ms")
    if tpot:
        ctx = sc.prompt_tokens + sc.new_tokens / 2  # the steps attend over prompt+1 ... prompt+new-1 positions
        w = weight_bytes_per_step(shape, cell.dtype, sc.batch_size, cell.quantization)
        kv = kv_cache_bytes(shape, cell.dtype, sc.batch_size, ctx)
        per_device = (w + kv) / tp
        achieved = per_device / (tpot / 1e3)
        out.update({
            "roofline_step_ms": tpot, "decode_context_tokens": ctx, "decode_weight_bytes": w, "decode_kv_cache_bytes_per_step": kv,
            "decode_bytes_per_step": w + kv, "decode_flops_per_step": decode_flops_per_step(shape, sc.batch_size, ctx),
            "achieved_bandwidth_bytes_per_s": achieved,
            # CPU ranks share the socket's LLC: the whole working set decides residency
            **roofline_cache.decode_fields(getattr(cell, "device", "cpu"), achieved, w + kv,
                                           dram_bytes_per_s=bandwidth_bytes_per_s,
                                           cache_bytes_per_s=cache_bandwidth_bytes_per_s, llc_bytes=llc_bytes),
            "datasheet_bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s if spec else None,
            "bandwidth_efficiency_datasheet": roofline_cache.share(
                achieved, spec.bandwidth_bytes_per_s if spec else None, "datasheet", w + kv, None)[0],
        })
    ttft = aggregates.get("median_ttft_ms")
    if ttft:
        flops = prefill_flops(shape, sc.batch_size, sc.prompt_tokens) / tp
        achieved_f = flops / (ttft / 1e3)
        peak = (spec.peak_flops_per_s.get(cell.dtype) if spec else None)
        out.update({
            "prefill_flops": flops * tp, "achieved_prefill_flops_per_s": achieved_f,
            "measured_matmul_flops_per_s": matmul_flops_per_s,
            "prefill_flops_efficiency_measured": _ratio(achieved_f, matmul_flops_per_s),
            "datasheet_peak_flops_per_s": peak,
            "prefill_flops_efficiency_datasheet": _ratio(achieved_f, peak),
        })
    return out


# ------------------------------------------------------------------------------- a results file, after the fact
def annotate_results(results: dict[str, Any], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """perfsuite.machine.roofline.results.annotate_results: :func:`annotate` for every benchmark of a results file."""
    from perfsuite.machine.roofline import results as roofline_results

    return roofline_results.annotate_results(results, *args, **kwargs)
