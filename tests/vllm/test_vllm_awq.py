"""The AWQ cell on vLLM's CPU W4A16 kernel, against the dequantized float twin run by torch (teacher forcing).

The AWQ checkpoint is built from the seeded tiny-llama weights (perfsuite.measure.quant.awq: group-wise round-to-nearest,
AWQ GEMM packing); the twin holds exactly the dequantized weights. vLLM's AWQ method takes 16-bit activations only,
so the cell runs bfloat16 (the kernel's AMX/AVX-512 path) and the twin runs float32: every difference comes from
the activation dtype and the kernels' summation order, never from the weights.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm is not installed")

from perfsuite.facts import models
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.machine import kernel_probes
from perfsuite.measure.backends import create
from perfsuite.measure.quant import awq

pytestmark = pytest.mark.slow  # each test starts a vLLM engine (~10-20 s on 2 cores): the slow tier

B, P, N = 2, 64, 32


def test_awq_cell_agrees_with_its_dequantized_twin():
    """Bound: a position counts when the twin's top-1 beats its top-2 by more than twice the largest logit change
    that bfloat16 activations alone cause in torch on the same sequences (the twin in bf16 vs fp32); vLLM must
    agree on every such position, and they must be at least a quarter of all positions. Near ties under the
    bound may go either way. Control: against the original float model (not the twin) the same tokens disagree at
    decisive positions, so the check tells the rounded weights from the originals."""
    float_dir = models.resolve("tiny-llama").path
    cell = Cell("vllm", "tiny-llama", "bfloat16", Scenario("t", B, P, N), quantization="awq", model_dir=float_dir)
    assert cell.id.endswith("-awq")
    be = create(cell)
    missing = kernel_probes.unmet(cell)  # the AWQ perf cell's own skip: no W4A16 kernel in this build on this CPU
    if missing:
        pytest.skip(missing)
    assert be.availability() is None
    be.load()
    try:
        info = be.info()
        assert info["resolved"]["quantization"] == "awq" and info["resolved"]["dtype"] == "bfloat16"
        ck = info["awq"]
        assert ck["group_size"] == 64 and ck["bits"] == 4  # 704 (MLP width) is not a multiple of 128
        prompts = models.prompts(B, P, models.resolve("tiny-llama").vocab_size)
        twin = awq.vllm_agreement(be, prompts, N)
        assert [r["tokens"] for r in be.vllm_request_stats()] == [N] * B
    finally:
        be.close()
    assert be.engine_processes_alive() == []
    print(f"AWQ vs dequantized twin, teacher-forced: { {k: v for k, v in twin.items() if k not in ('generated', 'teacher_forced_top1')} }")
    assert [len(t) for t in twin["generated"]] == [N] * B
    assert twin["positions"] == B * N
    assert twin["decisive_disagreements"] == 0, twin
    assert twin["decisive_positions"] >= twin["positions"] // 4, twin
    seqs = [p + t for p, t in zip(prompts, twin["generated"], strict=True)]
    original = awq.agreement(awq.reference_logits(float_dir, seqs), twin["teacher_forced_top1"], P - 1,
                             twin["margin_bound"])
    print(f"AWQ vs the float model it was rounded from: {original.as_dict()}")
    assert original.decisive_disagree > 0
