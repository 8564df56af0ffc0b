"""torch -> ONNX: the wrappers that flatten a transformers cache into graph inputs/outputs (dynamic and static
layouts), ``torch.onnx.export(dynamo=False)`` of them, and the check that the symbolic axes stayed symbolic.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from perfsuite.measure.backends.onnxruntime import decoder_io
from perfsuite.measure.backends.onnxruntime.entries import MODEL_FILE


def load_torch_model(model_dir: Path | str, dtype: str, attn_implementation: str | None = "sdpa") -> Any:
    """A checkpoint's causal LM in eval mode: safetensors only, local files only, no remote code."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, dtype), attn_implementation=attn_implementation,
        use_safetensors=True, local_files_only=True, trust_remote_code=False)
    return model.eval()


def kv_geometry(config: Any) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a transformers text config."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    return int(cfg.num_hidden_layers), kv_heads, head_dim


def _wrapper(model: Any, num_layers: int, static: bool) -> Any:
    """The decoder-with-past module the export traces: the flat past tensors become a transformers cache, and the
    graph returns the last position's logits, their greedy token and the flat present.

    The static layout's cache layers write the new keys/values into the slots ``position_ids`` names (``index_copy``,
    out of place: the graph outputs the written buffers) and hand the whole capacity to attention, under a 4-D
    additive mask built from ``attention_mask`` (valid slots) and causality (slot <= query position). A 4-D mask is
    used by transformers as it is, so the model's own mask construction (which would assume a dynamic cache) is not
    traced."""
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import Cache, CacheLayerMixin

    class _FixedCapacityLayer(CacheLayerMixin):
        is_compileable = True
        is_sliding = False
        keys: Any  # the mixin's Tensor | None: never None here
        values: Any

        def __init__(self, keys: Any, values: Any, write_pos: Any) -> None:
            super().__init__()
            self.keys, self.values = keys, values
            self.write_pos = write_pos
            self.max_cache_len = keys.shape[2]
            self.is_initialized = True  # the buffers are the graph inputs: nothing to allocate

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            pass

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            self.keys = self.keys.index_copy(2, self.write_pos, key_states)
            self.values = self.values.index_copy(2, self.write_pos, value_states)
            return self.keys, self.values

        def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
            return self.max_cache_len, 0

        def get_seq_length(self) -> int:
            return 0  # positions are always passed explicitly

        def get_max_length(self) -> int:
            return int(self.max_cache_len)

    class DecoderWithPast(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any) -> Any:
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(num_layers)]
            cache: Any
            if static:
                # one write position per step for the whole batch (prompts of one batch have equal length: no padding)
                cache = Cache(layers=[_FixedCapacityLayer(k, v, position_ids[0]) for k, v in pairs])
                slots = torch.arange(past[0].shape[2], device=input_ids.device)
                allowed = ((attention_mask[:, None, None, :] > 0)
                           & (slots[None, None, None, :] <= position_ids[:, None, :, None]))
                dtype = past[0].dtype
                mask = torch.zeros(allowed.shape, dtype=dtype, device=input_ids.device).masked_fill(
                    ~allowed, torch.finfo(dtype).min)
            else:
                cache, mask = DynamicCache(pairs), attention_mask
            out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True, logits_to_keep=1)
            logits = out.logits[:, -1, :]
            flat = [t for layer in cache.layers for t in (layer.keys, layer.values)]
            return (logits, logits.float().argmax(dim=-1), *flat)

    return DecoderWithPast().eval()


def torch_export(model: Any, path: Path, dtype: str, opset: int, layout: str = "dynamic") -> None:
    """``torch.onnx.export`` (TorchScript exporter) with dynamic batch / sequence / past axes (``layout="dynamic"``)
    or symbolic batch / sequence / capacity axes over fixed-capacity KV buffers (``layout="static"``)."""
    import torch

    layers, kv_heads, head_dim = kv_geometry(model.config)
    b, s, p = 2, 3, 5
    ids = torch.randint(4, 100, (b, s), dtype=torch.long)
    pos = torch.arange(p, p + s, dtype=torch.long)[None].expand(b, s).contiguous()
    tdtype = getattr(torch, dtype)
    inputs, outputs = decoder_io.io_names(layers)
    names = decoder_io.STATIC_DIM_NAMES if layout == "static" else decoder_io.DYNAMIC_DIM_NAMES
    axes = {k: dict(v) for k, v in names.items()}
    if layout == "static":
        capacity = p + s + 3  # slots beyond the valid part, as in every decode step but the last
        mask = torch.zeros(b, capacity, dtype=torch.long)
        mask[:, :p + s] = 1
        past = [torch.randn(b, kv_heads, capacity, head_dim, dtype=tdtype) for _ in range(2 * layers)]
        axes.update({n: dict(decoder_io.STATIC_KV_DIM_NAMES) for n in inputs[3:] + outputs[2:]})
    else:
        mask = torch.ones(b, p + s, dtype=torch.long)
        past = [torch.randn(b, kv_heads, p, head_dim, dtype=tdtype) for _ in range(2 * layers)]
        axes.update({n: {0: "batch", 2: "past"} for n in inputs[3:]})
        axes.update({n: {0: "batch", 2: "total"} for n in outputs[2:]})
    wrapper = _wrapper(model, layers, layout == "static")
    with warnings.catch_warnings(), torch.no_grad():
        # TracerWarnings, the legacy-exporter DeprecationWarning, aten::index notes: the parity check below is
        # what decides whether the trace is right.
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, (ids, mask, pos, *past), str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes=axes, opset_version=opset, dynamo=False, do_constant_folding=True)


def consolidate(tmp: Path) -> None:
    """Large models: the exporter may write one external-data file per tensor; keep one ``model.onnx.data``."""
    extra = [f for f in tmp.iterdir() if f.name != MODEL_FILE]
    if not extra:
        return
    import onnx

    proto = onnx.load(str(tmp / MODEL_FILE), load_external_data=True)
    for f in extra:
        f.unlink()
    onnx.save(proto, str(tmp / MODEL_FILE), save_as_external_data=True, all_tensors_to_one_file=True,
              location=MODEL_FILE + ".data", size_threshold=1024)


def static_dim_problems(onnx_path: Path, layout: str = "dynamic") -> list[str]:
    """Every intended-symbolic dimension must be symbolic (``dim_param``) in the saved graph; in the static layout
    it must also carry its name (``capacity`` shared by the mask and every KV buffer, so one override pins all)."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    problems = []
    for vi in list(graph.input) + list(graph.output):
        kv = vi.name.startswith(("past_", "present."))
        if layout == "static":
            named = decoder_io.STATIC_DIM_NAMES.get(vi.name, decoder_io.STATIC_KV_DIM_NAMES if kv else {})
        else:
            named = {a: "" for a in decoder_io.DYNAMIC_DIM_NAMES.get(vi.name, (0, 2) if kv else ())}  # any name
        dims = vi.type.tensor_type.shape.dim
        for axis, name in named.items():
            if axis >= len(dims) or not dims[axis].dim_param or (name and dims[axis].dim_param != name):
                val = (dims[axis].dim_param or dims[axis].dim_value) if axis < len(dims) else "missing"
                problems.append(f"{vi.name}[{axis}]={val}")
    return problems
