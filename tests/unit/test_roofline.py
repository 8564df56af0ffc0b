"""Roofline arithmetic (checked against published model sizes and the seed's headline) and the CPU measurement,
which runs for real here."""

from __future__ import annotations

import json
import math

import pytest

from perfsuite.facts import model_shape as ms
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.facts.models import PRESETS
from perfsuite.machine.roofline import annotate as rl
from perfsuite.machine.roofline import peaks
from perfsuite.machine.roofline.datasheet import datasheet

SHORT = Scenario("short", 1, 64, 32)


def shape(name: str) -> ms.ModelShape:
    return ms.ModelShape.from_config(PRESETS[name].config)


@pytest.mark.parametrize("name, published", [
    ("llama2-7b", 6.738e9),  # meta-llama/Llama-2-7b-hf: 6,738,415,616
    ("llama3-8b", 8.030e9),  # Meta-Llama-3-8B: 8.03B
    ("mistral-7b", 7.242e9),  # Mistral-7B-v0.1: 7.24B
    ("opt-1.3b", 1.316e9),  # OPT-1.3B, whose 2050 learned positions (4.2M) are not read per step and not counted
])
def test_parameter_counts_match_published_sizes(name: str, published: float) -> None:
    assert shape(name).total_params() == pytest.approx(published, rel=0.005)


def test_gqa_shrinks_the_kv_cache_by_the_group_factor() -> None:
    mha, gqa = shape("llama2-7b"), shape("llama3-8b")  # 32 vs 8 KV heads, same head_dim and layers
    per_token = ms.kv_cache_bytes(mha, "float16", 1, 1)
    assert per_token == 2 * 32 * 32 * 128 * 2 == 512 * 1024
    assert ms.kv_cache_bytes(gqa, "float16", 1, 1) == per_token / 4
    assert ms.kv_cache_bytes(gqa, "float16", 4, 1000) == 4 * 1000 * per_token / 4


def test_tied_embedding_is_read_once_as_the_head() -> None:
    opt = shape("opt-1.3b")
    assert opt.tied_embeddings and not opt.gated_mlp
    w = ms.weight_bytes_per_step(opt, "float16", batch=8)
    untied = ms.weight_bytes_per_step(ms.ModelShape(**{**opt.__dict__, "tied_embeddings": False}), "float16", 8)
    assert untied - w == 8 * opt.hidden * 2  # untied adds only the B gathered rows: the head is read either way


def test_quantized_weights() -> None:
    s = shape("llama2-7b")
    fp16 = ms.weight_bytes_per_step(s, "float16")
    awq = ms.weight_bytes_per_step(s, "float16", quantization="awq")
    head = s.vocab * s.hidden * 2
    # AWQ: 4-bit linear weights + group-128 fp16 scales and 4-bit zeros; the head stays fp16
    assert awq == pytest.approx(s.linear_params() * (4 + 20 / 128) / 8 + head + (fp16 - s.linear_params() * 2 - head))
    assert 0.25 < awq / fp16 < 0.30
    with pytest.raises(ValueError, match="quantization"):
        ms.weight_bytes_per_step(s, "float16", quantization="int3")


def test_seed_headline_is_half_of_one_mi250x_gcd() -> None:
    """Llama2-7B fp16 at 18 ms/token on an MI250X: about half of one GCD's bandwidth bound."""
    cell = Cell("torch", "llama2-7b", "float16", Scenario("chat", 1, 512, 128), device="cuda")
    out = rl.annotate(cell, PRESETS["llama2-7b"].config, {"median_tpot_ms": 18.0}, None,
                      device_name="AMD Instinct MI250X")  # what rocminfo calls each GCD
    assert out["datasheet_bandwidth_bytes_per_s"] == 3.2768e12 / 2
    assert out["decode_bytes_per_step"] == pytest.approx(13.5e9, rel=0.01)  # 13.2 GB weights + 0.30 GB KV
    assert out["achieved_bandwidth_bytes_per_s"] == pytest.approx(0.75e12, rel=0.01)
    assert 0.4 < out["bandwidth_efficiency_datasheet"] < 0.5
    assert out["bandwidth_efficiency_measured"] is None  # no run-start measurement given: None, not guessed
    bound_ms = out["decode_bytes_per_step"] / out["datasheet_bandwidth_bytes_per_s"] * 1e3
    assert 8.0 < bound_ms < 8.5  # the best one GCD could do


@pytest.mark.parametrize("name, expected", [
    ("AMD Instinct MI250X", "AMD Instinct MI250X, one GCD"),  # rocminfo_mi250x_rocm57.txt
    ("AMD Instinct MI250X/MI250", "AMD Instinct MI250X or MI250, one GCD"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),  # nvidia_smi_query_h100.csv
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H200", "NVIDIA H200 SXM"),
    ("AMD Radeon RX 7800 XT", None),
])
def test_datasheet_matching(name: str, expected: str | None) -> None:
    spec = datasheet(name)
    assert (spec.name if spec else None) == expected
    if spec:
        assert spec.source.startswith("https://")


def test_prefill_flops_and_efficiency() -> None:
    s = shape("llama2-7b")
    f = ms.prefill_flops(s, 1, 512)
    matmul = 2 * s.linear_params() * 512 + 2 * s.vocab * s.hidden
    attn = 4 * 32 * 32 * 128 * 512 * 513 / 2
    assert f == pytest.approx(matmul + attn)
    cell = Cell("vllm", "llama2-7b", "bfloat16", Scenario("long", 1, 512, 8), device="cuda")
    out = rl.annotate(cell, PRESETS["llama2-7b"].config, {"median_ttft_ms": 50.0}, 3e12,
                      device_name="NVIDIA H200", matmul_flops_per_s=700e12)
    assert out["achieved_prefill_flops_per_s"] == pytest.approx(f / 0.05)
    assert out["prefill_flops_efficiency_datasheet"] == pytest.approx(f / 0.05 / 989.4e12)
    assert out["prefill_flops_efficiency_measured"] == pytest.approx(f / 0.05 / 700e12)
    assert "achieved_bandwidth_bytes_per_s" not in out  # no TPOT given


def test_tensor_parallel_divides_per_device_traffic() -> None:
    one = Cell("vllm", "llama3-8b", "bfloat16", SHORT, device="cuda")
    two = Cell("vllm", "llama3-8b", "bfloat16", SHORT, device="cuda", tensor_parallel_size=2)
    a = rl.annotate(one, PRESETS["llama3-8b"].config, {"median_tpot_ms": 10.0}, 4e12, device_name="NVIDIA H200")
    b = rl.annotate(two, PRESETS["llama3-8b"].config, {"median_tpot_ms": 10.0}, 4e12, device_name="NVIDIA H200")
    assert b["achieved_bandwidth_bytes_per_s"] == pytest.approx(a["achieved_bandwidth_bytes_per_s"] / 2)


def test_cpu_cell_has_no_datasheet() -> None:
    cell = Cell("torch", "tiny-llama", "float32", SHORT)
    out = rl.annotate(cell, PRESETS["tiny-llama"].config, {"median_tpot_ms": 2.0, "median_ttft_ms": 5.0}, 10e9,
                      device_name="Intel(R) Xeon(R) Processor")
    assert "datasheet_device" not in out and out["bandwidth_efficiency_datasheet"] is None
    assert out["decode_context_tokens"] == 64 + 32 / 2
    assert out["bandwidth_efficiency_measured"] == pytest.approx(out["decode_bytes_per_step"] / 2e-3 / 10e9)


# ----------------------------------------------------------------------------------------- real, on the CPU
def test_cpu_copy_bandwidth_is_measured() -> None:
    pytest.importorskip("torch")
    m = peaks.measure_copy_bandwidth("cpu", nbytes=128 * 2**20, repeats=3)
    # Any machine this suite runs on moves between 1 GB/s and 1 TB/s; a wrong byte count or timer would not.
    assert 1e9 < m.value < 1e12 and m.median <= m.value and m.nbytes == 128 * 2**20
    assert "copy_" in m.method and "threads" in m.method


def test_cpu_copy_buffer_defeats_the_last_level_cache() -> None:
    for llc in (8 * 2**20, 480 * 2**20, 2**30):
        n = peaks.cpu_copy_nbytes(llc_bytes=llc)
        assert n % 4096 == 0 and 4096 <= n <= 2**30
        if (peaks._available_memory_bytes() or 0) >= 8 * 2**30:  # room for the full size
            assert n == min(max(2 * llc, 256 * 2**20), 2**30)  # the pair is >= 4x the cache, up to 2 GiB


def test_cpu_matmul_peak_is_measured() -> None:
    pytest.importorskip("torch")
    m = peaks.measure_matmul_flops("cpu", "float32", n=512, repeats=2)
    assert 1e8 < m.value < 1e14 and math.isfinite(m.median)


def test_annotate_results_of_a_recorded_quiet_machine_run(capsys: pytest.CaptureFixture[str]) -> None:
    """tests/unit/data/run_tiny_llama_torch_quiet_20261130.json is a real run of the tiny-llama torch cell (quiet machine)."""
    from pathlib import Path

    path = Path(__file__).parent / "data" / "run_tiny_llama_torch_quiet_20261130.json"
    rows = {r["metric"]: r for r in rl.annotate_results(json.loads(path.read_text()), 13e9, 120e9)}
    tpot = rows["tpot"]
    s = shape("tiny-llama")
    assert tpot["decode_weight_bytes"] == ms.weight_bytes_per_step(s, "float32", 1)
    assert tpot["achieved_bandwidth_bytes_per_s"] == pytest.approx(
        tpot["decode_bytes_per_step"] / (tpot["roofline_step_ms"] / 1e3))
    assert tpot["roofline_bound"] == "llc-unknown"  # the file recorded no LLC size: the DRAM copy is the reference
    assert 0 < tpot["bandwidth_efficiency_measured"] <= 1
    assert rows["ttft"]["prefill_flops"] == pytest.approx(ms.prefill_flops(s, 1, 64))
    # `perfsuite roofline`, the one command for it (one-line errors for a missing or unreadable file)
    from perfsuite.cli import main as cli

    assert cli(["roofline", str(path), "--bandwidth", "13e9", "--flops", "120e9", "--llc-bytes", str(8 * 2**20)]) == 0
    assert "of measured dram copy 13.00 GB/s [dram]" in capsys.readouterr().out
    # The 14.2 MB working set in a 32 MiB LLC: against the LLC copy, or no share at all; never a DRAM share.
    assert cli(["roofline", str(path), "--bandwidth", "13e9", "--flops", "1e11", "--llc-bytes", str(32 * 2**20)]) == 0
    out = capsys.readouterr().out
    assert "no share [cache-resident]: cache-resident: the 14.2 MB decode working set fits the 32 MiB LLC" in out
    assert "dram copy" not in out
    assert cli(["roofline", str(path), "--bandwidth", "13e9", "--flops", "1e11", "--llc-bytes", str(32 * 2**20),
                "--cache-bandwidth", "200e9"]) == 0
    assert "of measured LLC copy 200.00 GB/s [cache-resident]" in capsys.readouterr().out
    bad = path.parent / "no-such-run.json"
    assert cli(["roofline", str(bad), "--bandwidth", "13e9", "--flops", "1e11"]) == 2
    assert "no such results file" in capsys.readouterr().err


# ------------------------------------------------------------------------ cache residency, never above 100 %
def _tiny(llc: int | None, dram: float | None = 13e9, cache: float | None = None, tpot_ms: float = 1.0,
          device: str = "cpu") -> dict:
    cell = Cell("onnxruntime-cpu", "tiny-llama", "float32", SHORT, device=device)
    return rl.annotate(cell, PRESETS["tiny-llama"].config, {"median_tpot_ms": tpot_ms}, dram, llc_bytes=llc,
                       cache_bandwidth_bytes_per_s=cache)


def test_a_working_set_that_fits_the_llc_is_cache_resident_and_has_no_dram_share() -> None:
    """The reported defect: 14.2 MB/step at 1.0 ms = 14.2 GB/s = 108 % of a 13 GB/s DRAM copy (32 MiB L3)."""
    out = _tiny(32 * 2**20)
    assert out["decode_bytes_per_step"] == pytest.approx(14.23e6, rel=0.01)
    assert out["roofline_bound"] == "cache-resident" and out["llc_bytes"] == 32 * 2**20
    assert out["bandwidth_efficiency_measured"] is None and out["measured_bandwidth_bytes_per_s"] is None
    assert out["measured_dram_bandwidth_bytes_per_s"] == 13e9 and "fits the 32 MiB LLC" in out["bandwidth_note"]
    with_cache = _tiny(32 * 2**20, cache=200e9)
    assert with_cache["bandwidth_reference"] == "LLC copy"
    assert with_cache["bandwidth_efficiency_measured"] == pytest.approx(out["achieved_bandwidth_bytes_per_s"] / 200e9)


def test_an_llc_copy_slower_than_the_dram_copy_is_no_reference() -> None:
    """Seen on the loaded 2-core VM (load 11): the LLC copy measured 1.17 GB/s against a 15.3 GB/s DRAM copy."""
    out = _tiny(32 * 2**20, dram=15.3e9, cache=1.17e9)
    assert out["roofline_bound"] == "cache-resident" and out["bandwidth_efficiency_measured"] is None
    assert out["bandwidth_above_peak"] is None and "below the DRAM copy's 15.30 GB/s" in out["bandwidth_note"]


def test_a_working_set_larger_than_the_llc_is_dram_bound() -> None:
    out = _tiny(8 * 2**20, tpot_ms=2.0)
    assert out["roofline_bound"] == "dram" and out["bandwidth_reference"] == "dram copy"
    assert out["bandwidth_efficiency_measured"] == pytest.approx(out["achieved_bandwidth_bytes_per_s"] / 13e9)
    assert _tiny(None, tpot_ms=2.0)["roofline_bound"] == "llc-unknown"
    assert _tiny(32 * 2**20, device="cuda")["roofline_bound"] == "device-memory"  # a GPU's caches: not this rule


@pytest.mark.parametrize("llc, cache", [(8 * 2**20, None), (32 * 2**20, 14e9), (None, None)])
def test_no_share_is_ever_above_one(llc: int | None, cache: float | None) -> None:
    out = _tiny(llc, cache=cache, tpot_ms=1.0)  # 14.2 GB/s achieved: above both 13 GB/s (DRAM) and 14 GB/s (LLC)
    assert out["bandwidth_efficiency_measured"] is None
    above = out["bandwidth_above_peak"]
    assert above["ratio"] > 1 and "no share is given" in above["reason"] and "is above the" in above["reason"]


def test_cache_bandwidth_is_measured_within_the_llc() -> None:
    pytest.importorskip("torch")
    m = peaks.measure_cache_bandwidth(32 * 2**20)
    # Loose bounds: a loaded 2-core machine stalls a copy this small by a scheduler slice (< 1 GB/s seen here).
    assert m.nbytes == 8 * 2**20 and "fits the 32 MiB LLC" in m.method and 1e7 < m.value < 1e13
    assert m.median <= m.value and m.repeats >= 30
    assert peaks.cache_copy_nbytes(2**20) == 256 * 2**10
    got = peaks.cache_peaks(llc_bytes=16 * 2**20)
    assert got["llc_bytes"] == 16 * 2**20 and got["cache_copy_bandwidth_bytes_per_s"] > 0
