"""The model presets: transformers configs that are materialised with seeded random weights (perfsuite.facts.models),
so that torch, ONNX Runtime and vLLM load byte-identical weights and no hub is needed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfsuite.facts import identity_hash

MATERIALIZE_VERSION = 1  # bump when the way weights are generated changes


@dataclass(frozen=True)
class Preset:
    name: str
    architecture: str  # transformers class name, e.g. "LlamaForCausalLM"
    config: dict[str, Any]
    storage_dtype: str = "float32"  # dtype of the saved safetensors
    tiny: bool = False  # small enough for a CPU cell in seconds
    notes: str = ""
    seed: int = 0
    vocab_size: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "vocab_size", int(self.config["vocab_size"]))

    @property
    def digest(self) -> str:
        return identity_hash({"arch": self.architecture, "config": self.config, "dtype": self.storage_dtype,
                              "seed": self.seed, "v": MATERIALIZE_VERSION}, separators=(", ", ": "))


_LLAMA = {"model_type": "llama", "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
          "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "rope_theta": 10000.0}
_MISTRAL = {**_LLAMA, "model_type": "mistral", "sliding_window": None}
_OPT = {"model_type": "opt", "activation_function": "relu", "do_layer_norm_before": True, "init_std": 0.02,
        "enable_bias": True, "layer_norm_elementwise_affine": True, "pad_token_id": 1, "bos_token_id": 2,
        "eos_token_id": 2, "dropout": 0.0, "attention_dropout": 0.0}

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny-llama", "LlamaForCausalLM", {**_LLAMA, "vocab_size": 2048, "hidden_size": 256,
               "intermediate_size": 704, "num_hidden_layers": 4, "num_attention_heads": 8,
               "num_key_value_heads": 4, "head_dim": 32, "max_position_embeddings": 2048},
               tiny=True, notes="4 layers, GQA 8/4, 3.7M params"),
        Preset("tiny-opt", "OPTForCausalLM", {**_OPT, "vocab_size": 2048, "hidden_size": 256, "ffn_dim": 1024,
               "num_hidden_layers": 4, "num_attention_heads": 8, "max_position_embeddings": 2048,
               "word_embed_proj_dim": 256}, tiny=True, notes="4 layers, learned positions, LayerNorm"),
        Preset("llama2-7b", "LlamaForCausalLM", {**_LLAMA, "vocab_size": 32000, "hidden_size": 4096,
               "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 32, "max_position_embeddings": 4096}, storage_dtype="bfloat16",
               notes="shape of meta-llama/Llama-2-7b-hf"),
        Preset("opt-1.3b", "OPTForCausalLM", {**_OPT, "vocab_size": 50272, "hidden_size": 2048, "ffn_dim": 8192,
               "num_hidden_layers": 24, "num_attention_heads": 32, "max_position_embeddings": 2048,
               "word_embed_proj_dim": 2048}, storage_dtype="bfloat16", notes="shape of facebook/opt-1.3b"),
        Preset("llama3-8b", "LlamaForCausalLM", {**_LLAMA, "vocab_size": 128256, "hidden_size": 4096,
               "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "max_position_embeddings": 8192, "rope_theta": 500000.0},
               storage_dtype="bfloat16", notes="shape of meta-llama/Meta-Llama-3-8B"),
        Preset("mistral-7b", "MistralForCausalLM", {**_MISTRAL, "vocab_size": 32000, "hidden_size": 4096,
               "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "max_position_embeddings": 32768, "rope_theta": 1000000.0},
               storage_dtype="bfloat16", notes="shape of mistralai/Mistral-7B-v0.3"),
    )
}
