"""AWQ checkpoints from float weights (perfsuite.measure.quant.awq): rounding, AWQ GEMM packing, the checkpoint on disk and
its dequantized twin, the teacher-forced agreement count. The packing order is checked against vLLM's own loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from safetensors.torch import load_file  # noqa: E402

from perfsuite.facts import models  # noqa: E402
from perfsuite.measure.quant import awq  # noqa: E402


def test_rtn_error_is_within_half_a_step_and_values_fit_4_bits() -> None:
    torch.manual_seed(1)
    w = torch.randn(48, 128)
    q, scales, zeros = awq.quantize_rtn(w, 32)
    assert q.shape == (128, 48) and scales.shape == zeros.shape == (4, 48)
    assert scales.dtype == torch.float16 and int(q.min()) >= 0 and int(q.max()) <= 15
    assert int(zeros.min()) >= 0 and int(zeros.max()) <= 15
    deq = awq.dequantize(q, scales, zeros, 32)
    step = scales.float().repeat_interleave(32, dim=0).t()  # [out, in]
    assert bool(((deq - w).abs() <= step * 0.5 + 1e-6).all())


def test_pack_order_is_awqs_and_round_trips() -> None:
    vals = torch.arange(8, dtype=torch.int32).reshape(1, 8)  # column c holds value c
    packed = awq.pack(vals)
    nibbles = [(int(packed[0, 0]) >> (4 * slot)) & 15 for slot in range(8)]
    assert nibbles == [0, 2, 4, 6, 1, 3, 5, 7]  # slot i holds column AWQ_PACK_ORDER[i]
    big = torch.full((3, 16), 15, dtype=torch.int32)
    assert awq.pack(big).dtype == torch.int32 and int(awq.pack(big)[0, 0]) == -1  # all bits set, as AutoAWQ writes
    rnd = torch.randint(0, 16, (5, 64), dtype=torch.int32)
    assert torch.equal(awq.unpack(awq.pack(rnd)), rnd)


def test_packing_matches_vllms_awq_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.32 converts AWQ checkpoints to its standard layout in auto_awq._convert_awq_to_standard_format; our
    packed qweight/qzeros must come out as the values we quantized (a plain 0..7 nibble order does not)."""
    pytest.importorskip("vllm")
    import vllm.model_executor.parameter as vparam
    from vllm.model_executor.layers.quantization.auto_awq import _convert_awq_to_standard_format

    monkeypatch.setattr(vparam, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(vparam, "get_tensor_model_parallel_world_size", lambda: 1)
    torch.manual_seed(0)
    q, _, zeros = awq.quantize_rtn(torch.randn(64, 128), 32)

    def converted(qw: torch.Tensor, qz: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        layer = torch.nn.Module()
        layer.qweight = torch.nn.Parameter(qw, requires_grad=False)
        if qz is not None:
            layer.qzeros = torch.nn.Parameter(qz, requires_grad=False)
        _convert_awq_to_standard_format(layer, "qweight", "qzeros" if qz is not None else None, 4)
        k, n = q.shape  # standard layout: [in / 8, out], nibble i of row r = input row 8 r + i
        w = torch.stack([(layer.qweight.data >> (4 * i)) & 15 for i in range(8)], dim=1).reshape(k, n)
        z = None
        if qz is not None:  # [out / 8, groups], nibble i of row r = output column 8 r + i
            g = zeros.shape[0]
            z = torch.stack([(layer.qzeros.data >> (4 * i)) & 15 for i in range(8)], dim=1).reshape(n, g).t()
        return w, z

    w, z = converted(awq.pack(q), awq.pack(zeros))
    assert torch.equal(w, q) and z is not None and torch.equal(z, zeros)
    plain = torch.zeros(q.shape[0], q.shape[1] // 8, dtype=torch.int64)
    for i in range(8):
        plain |= q.reshape(q.shape[0], -1, 8)[:, :, i].to(torch.int64) << (4 * i)
    wrong, _ = converted((plain - ((plain >> 31) & 1) * (1 << 32)).to(torch.int32), None)
    assert not torch.equal(wrong, q)


@pytest.mark.parametrize("dims, tp, group", [([256, 704], 1, 64), ([4096, 11008], 1, 128), ([256, 704], 2, 32),
                                             ([4096, 14336], 2, 128)])
def test_default_group_size(dims: list[int], tp: int, group: int) -> None:
    assert awq.default_group_size(dims, tp) == group


def test_no_group_size_fits() -> None:
    with pytest.raises(awq.AwqError, match="awq_group_size"):
        awq.default_group_size([100])


def test_build_tiny_llama(tmp_path: Path) -> None:
    float_dir = models.resolve("tiny-llama", tmp_path).path
    ck = awq.build(float_dir)
    assert ck.built and ck.group_size == 64
    assert ck.awq_dir.parent == float_dir.parent  # beside the preset, in the same cache
    cfg = json.loads((ck.awq_dir / "config.json").read_text())
    assert cfg["quantization_config"] == {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True,
                                          "version": "gemm"}
    assert "quantization_config" not in json.loads((ck.twin_dir / "config.json").read_text())
    f = load_file(str(float_dir / "model.safetensors"))
    a = load_file(str(ck.awq_dir / "model.safetensors"))
    t = load_file(str(ck.twin_dir / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj"
    assert a[f"{name}.qweight"].shape == (704, 256 // 8) and a[f"{name}.qweight"].dtype == torch.int32
    assert a[f"{name}.qzeros"].shape == (704 // 64, 256 // 8) and a[f"{name}.scales"].shape == (11, 256)
    assert f"{name}.weight" not in a
    q, z = awq.unpack(a[f"{name}.qweight"]), awq.unpack(a[f"{name}.qzeros"])
    assert torch.equal(t[f"{name}.weight"], awq.dequantize(q, a[f"{name}.scales"], z, 64))
    for kept in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                 "model.layers.0.input_layernorm.weight"):
        assert torch.equal(a[kept], f[kept]) and torch.equal(t[kept], f[kept])
    assert sum(k.endswith(".qweight") for k in a) == 4 * 7  # q, k, v, o, gate, up, down per layer
    again = awq.build(float_dir)
    assert not again.built and again.awq_dir == ck.awq_dir


def test_already_quantized_is_refused(tmp_path: Path) -> None:
    ck = awq.build(models.resolve("tiny-llama", tmp_path).path)
    with pytest.raises(awq.AwqError, match="already quantized"):
        awq.build(ck.awq_dir, 64)


def test_agreement_counts_decisive_positions() -> None:
    ref = torch.tensor([[[0.0, 5.0, 0.0], [1.0, 1.001, 0.0], [3.0, 0.0, 0.0]]])  # margins 5, 0.001, 3
    a = awq.agreement(ref, [[1, 0, 0]], 0, margin_bound=0.01)
    assert (a.positions, a.agree, a.decisive, a.decisive_disagree) == (3, 2, 2, 0)  # the flipped near tie is allowed
    b = awq.agreement(ref, [[2, 1, 0]], 0, margin_bound=0.01)
    assert (b.agree, b.decisive_disagree) == (2, 1) and b.rate == pytest.approx(2 / 3)
