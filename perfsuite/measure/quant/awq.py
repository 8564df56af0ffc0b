"""An AWQ checkpoint (and its dequantized float twin) built from a float checkpoint: group-wise round-to-nearest
(asymmetric, 4 bits, zero points; no activation-aware scale search: perfsuite measures kernels, not model quality),
stored in AutoAWQ's GEMM layout, which vLLM's ``awq`` loader reads (docs/recipes.md, "AWQ weights built from the
preset"). Embeddings, norms, biases and the LM head keep their original bytes.

Bit slot ``i`` (shift ``4 i``) of a packed int32 holds column ``AWQ_PACK_ORDER[i]`` of a group of eight output
columns; vLLM 0.32 undoes it with ``_REVERSE_AWQ_PACK_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]``
(``vllm/model_executor/layers/quantization/auto_awq.py``, ``_convert_awq_to_standard_format``).

The twin holds each quantized weight as exactly ``w = (q - z) * s`` (``s`` as stored, float16) in float32, so torch
running it computes what vLLM's AWQ kernel computes, up to the activation dtype and summation order: the reference
for a teacher-forced top-1 check. Both are cached (:func:`checkpoint_dirs`), keyed by the float model's digest, in
the format of :mod:`perfsuite.facts.cache_entry`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from perfsuite.facts import cache_entry, identity_hash

AWQ_VERSION = 1  # bump when the recipe or the layout changes
BITS = 4
PACK = 32 // BITS  # values per int32
MAX_Q = (1 << BITS) - 1
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
GROUP_SIZES = (128, 64, 32)
SCALE_DTYPE = "float16"  # AutoAWQ stores scales in float16
TWIN_SUFFIX = "-dequant"


class AwqError(ValueError):
    """A checkpoint that cannot be turned into AWQ (shapes, group size); the message names the fix."""


@dataclass(frozen=True)
class AwqCheckpoint:
    awq_dir: Path  # config.json with quantization_config + model.safetensors (qweight/qzeros/scales)
    twin_dir: Path  # the dequantized float twin (plain float checkpoint)
    group_size: int
    built: bool  # built now (False: taken from the cache)
    meta: dict[str, Any]


def is_quantized_weight(name: str, shape: tuple[int, ...]) -> bool:
    """The 2-D weights of the decoder blocks' linear layers (attention and MLP projections)."""
    return len(shape) == 2 and ".layers." in name and name.endswith(".weight")


def default_group_size(in_features: list[int], tensor_parallel_size: int = 1) -> int:
    """The largest of 128/64/32 that divides every input dimension, also once split across TP ranks (a
    row-parallel layer's input is split; vLLM needs whole groups per rank) -- e.g. 64 for tiny-llama (704)."""
    for g in GROUP_SIZES:
        if all(n % g == 0 and (n // tensor_parallel_size) % g == 0 for n in in_features):
            return g
    raise AwqError(f"no AWQ group size in {GROUP_SIZES} divides the input dimensions {sorted(set(in_features))} "
                   f"(tensor_parallel_size={tensor_parallel_size}); set backend option awq_group_size")


def quantization_config(group_size: int) -> dict[str, Any]:
    """The ``quantization_config`` of the checkpoint's ``config.json``."""
    return {"quant_method": "awq", "bits": BITS, "group_size": group_size, "zero_point": True, "version": "gemm"}


def quantize_rtn(w: Any, group_size: int) -> tuple[Any, Any, Any]:
    """Asymmetric group-wise round-to-nearest of a ``[out, in]`` float weight.

    Returns ``(q, scales, zeros)``: ``q`` int32 ``[in, out]`` in 0..15 (AWQ keeps the input dim first),
    ``scales`` float16 ``[in / group, out]``, ``zeros`` int32 ``[in / group, out]`` in 0..15. Rounding uses the
    float16 scale, so ``dequantize`` of the stored values is exactly what a loader computes.
    """
    out_f, in_f = w.shape
    if in_f % group_size:
        raise AwqError(f"input dimension {in_f} is not a multiple of the AWQ group size {group_size}")
    if out_f % PACK:
        raise AwqError(f"output dimension {out_f} is not a multiple of {PACK} (eight 4-bit values per int32)")
    wt = w.detach().to(torch.float32).t().reshape(in_f // group_size, group_size, out_f)  # [G, g, out]
    w_max = wt.amax(dim=1)
    w_min = wt.amin(dim=1)
    scales = ((w_max - w_min).clamp(min=1e-5) / MAX_Q).to(getattr(torch, SCALE_DTYPE))
    s = scales.to(torch.float32)
    zeros = torch.clamp(torch.round(-w_min / s), 0, MAX_Q)
    q = torch.clamp(torch.round(wt / s[:, None, :]) + zeros[:, None, :], 0, MAX_Q)
    return q.reshape(in_f, out_f).to(torch.int32), scales, zeros.to(torch.int32)


def dequantize(q: Any, scales: Any, zeros: Any, group_size: int) -> Any:
    """``[out, in]`` float32 weight from ``q [in, out]``, ``scales``/``zeros [in / group, out]``."""
    in_f, out_f = q.shape
    qg = q.reshape(in_f // group_size, group_size, out_f).to(torch.float32)
    w = (qg - zeros[:, None, :].to(torch.float32)) * scales[:, None, :].to(torch.float32)
    return w.reshape(in_f, out_f).t().contiguous()


def pack(values: Any) -> Any:
    """``[rows, cols]`` ints in 0..15 -> int32 ``[rows, cols / 8]`` in AWQ's interleaved order."""
    rows, cols = values.shape
    v = values.to(torch.int64).reshape(rows, cols // PACK, PACK)
    packed = torch.zeros(rows, cols // PACK, dtype=torch.int64)
    for slot, col in enumerate(AWQ_PACK_ORDER):
        packed |= (v[:, :, col] & MAX_Q) << (BITS * slot)
    # int64 holds 0..2^32-1; the int32 with the same bits is what AutoAWQ writes
    return (packed - ((packed >> 31) & 1) * (1 << 32)).to(torch.int32)


def unpack(packed: Any) -> Any:
    """Inverse of :func:`pack` (for checks): int32 ``[rows, cols / 8]`` -> int32 ``[rows, cols]``."""
    rows, n = packed.shape
    p = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.zeros(rows, n, PACK, dtype=torch.int64)
    for slot, col in enumerate(AWQ_PACK_ORDER):
        out[:, :, col] = (p >> (BITS * slot)) & MAX_Q
    return out.reshape(rows, n * PACK).to(torch.int32)


def _load_float(model_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    if not tensors:
        raise AwqError(f"{model_dir}: no *.safetensors weights to quantize")
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("quantization_config"):
        raise AwqError(f"{model_dir}: already quantized ({config['quantization_config'].get('quant_method')}); "
                       "AWQ is built from a float checkpoint")
    return config, tensors


def checkpoint_dirs(model_dir: Path, group_size: int) -> tuple[Path, Path]:
    """Where the AWQ checkpoint of ``model_dir`` and its twin live: beside a perfsuite-materialised model, else in
    the cache root's ``models/`` (never inside a user's checkpoint directory)."""
    from perfsuite.facts import cache, models
    from perfsuite.measure.backends.onnxruntime.export import model_digest

    model_dir = Path(model_dir)
    if (model_dir / models.MARKER).is_file():
        base, name = model_dir.parent, model_dir.name
    else:
        base, name = cache.root_for(model_dir) / "models", f"{model_dir.name}-{model_digest(model_dir)}"
    awq = base / f"{name}-awq-g{group_size}-v{AWQ_VERSION}"
    return awq, awq.with_name(awq.name + TWIN_SUFFIX)


def linear_in_features(model_dir: Path) -> list[int]:
    """Input dimensions of the weights that would be quantized (reads the safetensors headers only)."""
    from safetensors import safe_open

    dims = []
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for k in fh.keys():
                shape = tuple(fh.get_slice(k).get_shape())
                if is_quantized_weight(k, shape):
                    dims.append(int(shape[1]))
    return dims


def build(model_dir: Path, group_size: int | None = None, tensor_parallel_size: int = 1) -> AwqCheckpoint:
    """The cached AWQ checkpoint (and twin) of a float checkpoint, built on a miss."""
    from perfsuite.facts import models
    from perfsuite.measure.backends.onnxruntime.export import model_digest

    model_dir = Path(model_dir)
    if group_size is None:
        group_size = default_group_size(linear_in_features(model_dir), tensor_parallel_size)
    awq_dir, twin_dir = checkpoint_dirs(model_dir, group_size)
    digest = identity_hash({"float": model_digest(model_dir), "group_size": group_size, "bits": BITS,
                            "v": AWQ_VERSION}, separators=(", ", ": "))
    if models.is_complete(awq_dir, digest) and models.is_complete(twin_dir, digest):
        return AwqCheckpoint(awq_dir, twin_dir, group_size, False, json.loads((awq_dir / models.MARKER).read_text()))
    config, tensors = _load_float(model_dir)
    awq_t: dict[str, Any] = {}
    twin_t: dict[str, Any] = {}
    quantized: list[str] = []
    for name, w in tensors.items():
        if not is_quantized_weight(name, tuple(w.shape)):
            awq_t[name] = twin_t[name] = w
            continue
        q, scales, zeros = quantize_rtn(w, group_size)
        prefix = name.removesuffix(".weight")
        awq_t[f"{prefix}.qweight"] = pack(q).contiguous()
        awq_t[f"{prefix}.qzeros"] = pack(zeros).contiguous()
        awq_t[f"{prefix}.scales"] = scales.contiguous()
        twin_t[name] = dequantize(q, scales, zeros, group_size)  # float32 whatever the source dtype: exact
        quantized.append(prefix)
    if not quantized:
        raise AwqError(f"{model_dir}: no decoder-block linear weights (*.layers.<i>.*.weight) to quantize")
    meta = {"name": awq_dir.name, "digest": digest, "float_model": str(model_dir), "group_size": group_size,
            "bits": BITS, "recipe": "group-wise round-to-nearest, asymmetric, AWQ GEMM packing",
            "quantized_modules": len(quantized), "awq_version": AWQ_VERSION}
    _write(awq_dir, {**config, "quantization_config": quantization_config(group_size)}, awq_t, {**meta, "kind": "awq"})
    _write(twin_dir, config, twin_t, {**meta, "name": twin_dir.name, "kind": "awq-dequantized-twin"})
    return AwqCheckpoint(awq_dir, twin_dir, group_size, True, {**meta, "kind": "awq"})


def _write(target: Path, config: dict[str, Any], tensors: dict[str, Any], meta: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    from perfsuite.facts import models

    with cache_entry.building(target) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        cache_entry.commit(tmp, target, meta, models.MARKER)  # replaces an incomplete or outdated earlier attempt


@dataclass(frozen=True)
class Agreement:
    """Teacher-forced top-1 agreement of a model under test with a reference on the same token sequences."""

    positions: int
    agree: int
    decisive: int  # positions whose reference top-2 margin exceeds the bound
    decisive_disagree: int  # of those, positions where the model under test picked another token
    margin_bound: float

    @property
    def rate(self) -> float:
        return self.agree / self.positions if self.positions else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"positions": self.positions, "agree": self.agree, "top1_agreement": round(self.rate, 4),
                "decisive_positions": self.decisive, "decisive_disagreements": self.decisive_disagree,
                "margin_bound": self.margin_bound}


def reference_logits(model_dir: Path, sequences: list[list[int]], dtype: str = "float32") -> Any:
    """Logits ``[B, L, vocab]`` (float32) of a float checkpoint run by transformers over whole sequences: one
    forward pass is teacher forcing, position ``t`` predicts token ``t + 1``."""
    from perfsuite.measure.backends.onnxruntime.tracing import load_torch_model

    model = load_torch_model(model_dir, dtype, None)  # None: transformers' default attention
    with torch.inference_mode():
        out = model(input_ids=torch.tensor(sequences, dtype=torch.long)).logits.float()
    del model
    return out


def agreement(ref_logits: Any, got_top1: list[list[int]], start: int, margin_bound: float) -> Agreement:
    """Compare ``got_top1[b][t]`` (the model under test's top-1 after position ``start + t``) with the reference's
    argmax at the same positions. A position is *decisive* when the reference's top-1 beats its top-2 by more than
    ``margin_bound`` logits: numerical differences smaller than the bound cannot flip it."""
    agree = decisive = bad = total = 0
    for b, row in enumerate(got_top1):
        ref = ref_logits[b, start:start + len(row)]
        top2 = torch.topk(ref, 2, dim=-1).values
        same = [int(tok) == r for tok, r in zip(row, ref.argmax(-1).tolist(), strict=True)]
        dec = [m > margin_bound for m in (top2[:, 0] - top2[:, 1]).tolist()]
        total += len(row)
        agree += sum(same)
        decisive += sum(dec)
        bad += sum(d and not s for d, s in zip(dec, same, strict=True))
    return Agreement(total, agree, decisive, bad, margin_bound)


def vllm_agreement(backend: Any, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    """Teacher-forced top-1 agreement of a loaded vLLM AWQ cell with its dequantized twin run by torch in float32:
    one greedy generation through the backend, then vLLM's top-1 after every position of that sequence
    (:meth:`~perfsuite.measure.backends.vllm_backend.VllmBackend.teacher_forced_top1`). The margin bound is twice
    the largest logit change the cell's activation dtype alone causes (docs/recipes.md, "Agreement bound"). Untimed.
    """
    twin = backend.info()["awq"]["dequantized_twin"]
    toks = backend.generate(prompts, new_tokens)
    seqs = [p + t for p, t in zip(prompts, toks, strict=True)]
    start = len(prompts[0]) - 1
    got = backend.teacher_forced_top1(seqs, start)
    ref = reference_logits(twin, seqs)
    noise = float((ref - reference_logits(twin, seqs, backend.cell.dtype)).abs().max())  # the dtype's own error
    a = agreement(ref, got, start, 2 * noise)
    return {**a.as_dict(), "activation_dtype_logit_noise": noise, "reference": "dequantized twin, torch float32",
            "generated": toks, "teacher_forced_top1": got}
