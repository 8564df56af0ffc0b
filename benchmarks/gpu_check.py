"""One GPU check for a machine with a GPU (NVIDIA with CUDA torch, or AMD with ROCm torch): the doctor, the
device-memory sampler (this process and another process), the copy-kernel bandwidth and matmul peak against the
datasheet, and the roofline of a real Llama-2-7B-shaped decode. Writes under benchmarks/data/gpu_check/ with the date.

    python benchmarks/gpu_check.py            # about 2-4 minutes on an H200
    python benchmarks/gpu_check.py --quick    # skip the 7B decode

On a machine without a GPU it says so and exits 0 without writing anything.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfsuite.machine import devicemem, doctor  # noqa: E402
from perfsuite.machine.doctor.report import render  # noqa: E402
from perfsuite.machine.roofline import annotate, peaks  # noqa: E402
from perfsuite.machine.roofline.datasheet import datasheet  # noqa: E402

GiB = 2**30
OTHER_PROCESS = ("import sys, time, torch; n = int(sys.argv[1]); x = torch.empty(n, dtype=torch.uint8, device='cuda');"
                 " x.fill_(1); torch.cuda.synchronize(); print('allocated', flush=True); time.sleep(float(sys.argv[2]))")


def log(lines: list[str], text: str) -> None:
    print(text, flush=True)
    lines.append(text)


def step(results: dict[str, Any], lines: list[str], name: str, fn: Any) -> None:
    t0 = time.perf_counter()
    try:
        results[name] = fn()
        results[name + "_s"] = round(time.perf_counter() - t0, 2)
    except Exception as exc:
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        log(lines, f"[{name}] FAILED: {type(exc).__name__}: {exc}")


def check_doctor(lines: list[str]) -> dict[str, Any]:
    r = doctor.collect("cuda")
    for line in render(r):
        log(lines, line)
    return {"report": r.as_dict(), "exit_code": r.exit_code, "machine_facts": doctor.machine_facts("cuda")}


def check_devicemem_self(torch: Any, lines: list[str]) -> dict[str, Any]:
    """Allocate 4 GiB in this process: every reader must see it; torch's allocator peak is the reference."""
    out: dict[str, Any] = {}
    readers = {}
    for name in ("amdsmi/nvml", "torch"):
        reader, why = devicemem.open_reader("cuda") if name != "torch" else (
            devicemem.TorchReader(torch, [0]), "")
        if reader is None or (name != "torch" and reader.source == "torch.cuda.mem_get_info"):
            out[name] = {"absent": why or "falls back to torch"}
            continue
        readers[name] = reader
    for name, reader in readers.items():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        with devicemem.DeviceMemorySampler("cuda", reader=reader, interval_s=0.005) as s:
            x = torch.empty(4 * GiB, dtype=torch.uint8, device="cuda")
            x.fill_(1)
            torch.cuda.synchronize()
            time.sleep(0.3)
            del x
            torch.cuda.empty_cache()
            time.sleep(0.1)
        info = s.result.extra_info()
        out[name] = {**info, "error": s.result.error, "torch_max_allocated_bytes": torch.cuda.max_memory_allocated()}
        delta = info.get("peak_device_delta_bytes", 0)
        log(lines, f"[devicemem self] {reader.source}: delta {delta / GiB:.3f} GiB over {info.get('device_memory_samples')}"
                   f" samples (allocated 4 GiB; torch peak {torch.cuda.max_memory_allocated() / GiB:.3f} GiB) -> "
                   f"{'OK' if delta >= 3.9 * GiB else 'MISSED'}")
        out[name]["ok"] = delta >= 3.9 * GiB
    return out


def check_devicemem_other_process(lines: list[str]) -> dict[str, Any]:
    """Another process (as vLLM's workers are) allocates 2 GiB: the device-level reading must see it."""
    with devicemem.DeviceMemorySampler("cuda", interval_s=0.01) as s:
        p = subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(2 * GiB), "1.0"], capture_output=True, text=True,
                           timeout=120, check=False)
    info = s.result.extra_info()
    delta = info.get("peak_device_delta_bytes", 0)
    log(lines, f"[devicemem other process] {info.get('device_memory_source')}: delta {delta / GiB:.3f} GiB (child "
               f"allocated 2 GiB + its context; rc {p.returncode}) -> {'OK' if delta >= 2 * GiB else 'MISSED'}")
    return {**info, "child_rc": p.returncode, "child_stderr": p.stderr[-2000:], "ok": delta >= 2 * GiB,
            "error": s.result.error}


def check_bandwidth(torch: Any, lines: list[str]) -> dict[str, Any]:
    name = torch.cuda.get_device_name(0)
    spec = datasheet(name)
    out: dict[str, Any] = {"device_name": name, "datasheet": spec.__dict__ if spec else None}
    for size in (256 * 2**20, GiB, 2 * GiB):
        m = peaks.measure_copy_bandwidth("cuda:0", nbytes=size, repeats=10)
        ref = spec.bandwidth_bytes_per_s if spec else None
        eff = m.value / ref if ref else None
        out[f"copy_{size // 2**20}MiB"] = {**m.as_dict(), "fraction_of_datasheet": eff}
        log(lines, f"[bandwidth] {m.method}: best {m.value / 1e9:.0f} GB/s, median {m.median / 1e9:.0f} GB/s"
                   + (f" = {eff:.1%} of the datasheet {ref / 1e12:.2f} TB/s" if eff and ref else ""))
    for dtype in ("bfloat16", "float16"):
        mm = peaks.measure_matmul_flops("cuda:0", dtype, n=8192, repeats=10)
        peak = spec.peak_flops_per_s.get(dtype) if spec else None
        out[f"matmul_{dtype}"] = {**mm.as_dict(), "fraction_of_datasheet": mm.value / peak if peak else None}
        log(lines, f"[matmul] {mm.method}: {mm.value / 1e12:.0f} TFLOP/s"
                   + (f" = {mm.value / peak:.1%} of the datasheet {peak / 1e12:.0f}" if peak else ""))
    return out


def check_decode_roofline(torch: Any, lines: list[str], bandwidth: float, flops: float | None,
                          model_name: str = "llama2-7b", device: str = "cuda", dtype: str = "bfloat16",
                          prompt: int = 512, new: int = 64) -> dict[str, Any]:
    """A Llama-shaped model (random weights built on the device: no download), batch 1, ``prompt`` tokens then
    ``new`` tokens; each decode step timed (CUDA events on a GPU); the median step gives the roofline
    (perfsuite.machine.roofline.annotate)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    from perfsuite.facts.cells import Cell, Scenario
    from perfsuite.facts.models import PRESETS

    cfg_dict = dict(PRESETS[model_name].config)
    cfg = LlamaConfig(**{k: v for k, v in cfg_dict.items() if k != "model_type"})
    torch.manual_seed(0)
    gpu = device != "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype)).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, prompt), device=device)

    def sync() -> None:
        if gpu:
            torch.cuda.synchronize()

    with devicemem.DeviceMemorySampler(device, interval_s=0.01) as mem, torch.inference_mode():
        for _ in range(2):  # warm-up prefills
            out = model(input_ids=ids, use_cache=True)
        sync()
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1)
        sync()
        ttft_ms = (time.perf_counter() - t0) * 1e3
        past, steps = out.past_key_values, []
        for _ in range(new - 1):
            if gpu:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
            t1 = time.perf_counter()
            out = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1)
            if gpu:
                e.record()
                e.synchronize()
                steps.append(s.elapsed_time(e))
            else:
                nxt.tolist()
                steps.append((time.perf_counter() - t1) * 1e3)
            past = out.past_key_values
    steps.sort()
    agg = {"median_itl_ms": steps[len(steps) // 2], "median_ttft_ms": ttft_ms}
    cell = Cell("torch", model_name, dtype, Scenario("gpu-check", 1, prompt, new), device="cuda" if gpu else "cpu")
    name = torch.cuda.get_device_name(0) if gpu else None
    extra = annotate.annotate(cell, cfg_dict, agg, bandwidth, device_name=name, matmul_flops_per_s=flops)
    eff_ds = extra.get("bandwidth_efficiency_datasheet")
    log(lines, f"[roofline] {model_name} {dtype} b1 p{prompt} n{new}: step {agg['median_itl_ms']:.2f} ms, "
               f"{extra['decode_bytes_per_step'] / 1e9:.3f} GB/step -> "
               f"{extra['achieved_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s = "
               + annotate.share_text(extra)
               + (f", {eff_ds:.1%} of datasheet" if eff_ds else "")
               + f"; prefill {extra['achieved_prefill_flops_per_s'] / 1e12:.3f} TFLOP/s")
    log(lines, f"[roofline] device memory during it: {mem.result.extra_info() or 'not measured (' + str(mem.result.error) + ')'}")
    del model, past, out
    if gpu:
        torch.cuda.empty_cache()
    return {"aggregates": agg, "steps_ms": steps, "extra_info": extra, "device_memory": mem.result.extra_info()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the 7B decode roofline")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "data" / "gpu_check")
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_check: skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        build = f"HIP {torch.version.hip}" if torch.version.hip else (
            f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build")
        print(f"gpu_check: skipped: torch {torch.__version__} ({build}) sees no GPU; nothing written")
        return 0
    torch.cuda.init()
    lines: list[str] = []
    results: dict[str, Any] = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               "torch": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda,
                               "device_name": torch.cuda.get_device_name(0)}
    step(results, lines, "doctor", lambda: check_doctor(lines))
    step(results, lines, "devicemem_self", lambda: check_devicemem_self(torch, lines))
    step(results, lines, "devicemem_other_process", lambda: check_devicemem_other_process(lines))
    step(results, lines, "bandwidth", lambda: check_bandwidth(torch, lines))
    bw = results.get("bandwidth", {}).get(f"copy_{2 * GiB // 2**20}MiB", {}).get("value")
    fl = results.get("bandwidth", {}).get("matmul_bfloat16", {}).get("value")
    if not a.quick and bw:
        step(results, lines, "decode_roofline", lambda: check_decode_roofline(torch, lines, bw, fl))
    rc = results.get("doctor", {}).get("machine_facts", {})
    slug = "-".join(filter(None, [dt.date.today().isoformat(),
                                  (rc.get("gpus") or [{}])[0].get("name", results["device_name"]) or "gpu"]))
    slug = "".join(c if c.isalnum() or c in "-." else "-" for c in slug.lower())
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{slug}.json").write_text(json.dumps(results, indent=2, default=str))
    (a.out / f"{slug}.txt").write_text("\n".join(lines) + "\n")
    print(f"gpu_check: wrote {a.out / slug}.json and .txt")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
