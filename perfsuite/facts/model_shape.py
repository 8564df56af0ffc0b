"""A decoder model's shape, from its ``config.json``, and what one step of it reads and computes. Conventions, so the
numbers can be checked by hand:

* weights: every linear layer, norm and the LM head once per step; the embedding lookup reads B rows.
* KV cache: K and V of every layer for the context, ``2 * layers * kv_heads * head_dim * context * batch`` elements
  (GQA: kv_heads < heads). Activations (B x hidden per layer) are left out: < 0.1 %.
* quantized weights: int8 -> 1 byte per linear weight; AWQ/GPTQ 4-bit with group-128 scales and zeros ->
  4 + 20/128 bits per linear weight; the embedding stays in the cell's dtype (AWQ also keeps the LM head).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
