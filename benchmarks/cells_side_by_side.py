"""Issue 11's cells side by side, each in a fresh interpreter (as perfsuite's workers run cells):

* ``--suite vllm``: vLLM TP=1 vs TP=2 (float32) and AWQ vs float (bfloat16): engine start, TTFT, TPOT, and the AWQ
  cell's teacher-forced top-1 agreement with its dequantized twin;
* ``--suite ort``: the ONNX Runtime CPU decoder, dynamic vs static layout: TTFT, TPOT and the distinct input shapes
  each session was fed per generation.

TTFT = one prefill, TPOT = mean decode step of a generation (host clock around the backend calls, as
perfsuite.measure.loop times them); the table shows medians over the timed generations.

    python benchmarks/cells_side_by_side.py --suite vllm --generations 20
    python benchmarks/cells_side_by_side.py --suite ort --generations 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SUITES: dict[str, list[dict]] = {
    "vllm": [
        {"label": "vllm TP=1 float32", "backend": "vllm", "dtype": "float32"},
        {"label": "vllm TP=2 float32", "backend": "vllm", "dtype": "float32", "tensor_parallel_size": 2},
        {"label": "vllm float bfloat16", "backend": "vllm", "dtype": "bfloat16"},
        {"label": "vllm AWQ bfloat16", "backend": "vllm", "dtype": "bfloat16", "quantization": "awq"},
    ],
    "ort": [
        {"label": "onnxruntime-cpu dynamic", "backend": "onnxruntime-cpu", "dtype": "float32",
         "options": {"decoder": "dynamic"}},
        {"label": "onnxruntime-cpu static", "backend": "onnxruntime-cpu", "dtype": "float32",
         "options": {"decoder": "static"}},
    ],
}


def worker(spec: dict, args: argparse.Namespace, out: Path) -> None:
    from perfsuite.facts import models
    from perfsuite.facts.cells import Cell, Scenario
    from perfsuite.measure.backends import create

    resolved = models.resolve(args.model)
    sc = Scenario("bench", args.batch_size, args.prompt_tokens, args.new_tokens)
    cell = Cell(spec["backend"], args.model, spec["dtype"], sc, quantization=spec.get("quantization", "none"),
                tensor_parallel_size=spec.get("tensor_parallel_size", 1),
                options=tuple(sorted(spec.get("options", {}).items())), model_dir=resolved.path)
    be = create(cell)
    reason = be.availability()
    if reason:
        out.write_text(json.dumps({"skipped": reason}))
        return
    t0 = time.perf_counter()
    be.load()
    load_s = time.perf_counter() - t0
    prompts = models.prompts(sc.batch_size, sc.prompt_tokens, resolved.vocab_size)
    ttft, tpot = [], []
    try:
        for g in range(args.warmup + args.generations):
            t = time.perf_counter()
            r = be.prefill(prompts)
            first = time.perf_counter() - t
            steps = []
            for _ in range(sc.new_tokens - 1):
                t = time.perf_counter()
                r = be.decode(r.state)
                steps.append(time.perf_counter() - t)
            be.release(r.state)
            if g >= args.warmup:
                ttft.append(first * 1000)
                tpot.append(statistics.fmean(steps) * 1000)
        info = be.info()
        extra = {}
        if cell.quantization == "awq":
            from perfsuite.measure.quant import awq

            a = awq.vllm_agreement(be, prompts, sc.new_tokens)
            extra["awq_agreement"] = {k: v for k, v in a.items() if k not in ("generated", "teacher_forced_top1")}
    finally:
        be.close()
    out.write_text(json.dumps({"load_s": load_s, "engine_start_s": info.get("engine_start_s"), "ttft_ms": ttft,
                               "tpot_ms": tpot, "shapes": info.get("input_shapes_per_generation"), **extra},
                              default=str))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=2, help="untimed generations per cell (default 2)")
    ap.add_argument("--generations", type=int, default=20, help="timed generations per cell (default 20)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(args.spec), args, Path(args.worker))
        return 0
    specs = [s for name, ss in SUITES.items() if args.suite in (name, "all") for s in ss]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    print(f"{args.model} b{args.batch_size} p{args.prompt_tokens} n{args.new_tokens}, {args.warmup} warm-up + "
          f"{args.generations} timed generations per cell, one fresh process per cell")
    print(f"{'cell':28} {'start s':>8} {'TTFT p50 ms':>12} {'TPOT p50 ms':>12} {'TPOT p10-p90':>16}  notes")
    for spec in specs:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            cmd = [sys.executable, __file__, "--worker", str(out), "--spec", json.dumps(spec), *sys.argv[1:]]
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            r = json.loads(out.read_text())
        if "skipped" in r:
            print(f"{spec['label']:28} skipped: {r['skipped']}")
            continue
        q = statistics.quantiles(r["tpot_ms"], n=10)
        start = r["engine_start_s"] if r["engine_start_s"] is not None else r["load_s"]
        notes = []
        if r.get("shapes"):
            notes.append(f"input shapes per generation {r['shapes']}")
        if r.get("awq_agreement"):
            a = r["awq_agreement"]
            notes.append(f"AWQ vs dequantized twin: top-1 {a['agree']}/{a['positions']}, decisive "
                         f"{a['decisive_positions']} with {a['decisive_disagreements']} disagreements "
                         f"(bound {a['margin_bound']:.3g} logits)")
        print(f"{spec['label']:28} {start:8.1f} {statistics.median(r['ttft_ms']):12.2f} "
              f"{statistics.median(r['tpot_ms']):12.3f} {q[0]:7.3f}-{q[-1]:7.3f}  {'; '.join(notes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
