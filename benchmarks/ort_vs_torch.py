"""tiny-llama b1-p64-n32 float32: export time, TTFT/TPOT medians for torch vs onnxruntime-cpu (+int8), interleaved in one process.

python benchmarks/ort_vs_torch.py [nospin]
"""

import os
import statistics
import sys
import tempfile
import time

os.environ["PERFSUITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="ps-measure-")  # fresh: export is timed for real
from perfsuite.facts import models
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure.backends import create

sc = Scenario("m", 1, 64, 32)
path = models.resolve("tiny-llama").path
SPIN = tuple((("allow_spinning", False),)) if "nospin" in sys.argv else ()
cells = {
    "torch": Cell("torch", "tiny-llama", "float32", sc, model_dir=path),
    "ort-cpu": Cell("onnxruntime-cpu", "tiny-llama", "float32", sc, model_dir=path, options=SPIN),
    "ort-cpu-int8": Cell(
        "onnxruntime-cpu", "tiny-llama", "float32", sc, quantization="int8-dynamic", model_dir=path, options=SPIN
    ),
}
bs = {}
for k, c in cells.items():
    b = create(c)
    t = time.perf_counter()
    b.load()
    bs[k] = b
    print(
        f"{k}: load {time.perf_counter() - t:.2f}s",
        {
            x: b.info().get(x)
            for x in ("export_seconds", "export_cache_hit", "verification", "quantize_seconds", "int8_top1_agreement")
        }
        if k != "torch"
        else "",
    )
prompts = models.prompts(1, 64, models.resolve("tiny-llama").vocab_size)
res = {k: {"ttft": [], "tpot": [], "tok": None} for k in bs}
for it in range(6):  # first round = warm-up
    for k, b in bs.items():
        t0 = time.perf_counter()
        r = b.prefill(prompts)
        t1 = time.perf_counter()
        toks = [r.tokens[0]]
        for _ in range(sc.new_tokens - 1):
            r = b.decode(r.state)
            toks.append(r.tokens[0])
        t2 = time.perf_counter()
        b.release(r.state)
        if it:
            res[k]["ttft"].append((t1 - t0) * 1e3)
            res[k]["tpot"].append((t2 - t1) * 1e3 / (sc.new_tokens - 1))
        res[k]["tok"] = toks
for k, v in res.items():
    print(
        f"{k:13s} TTFT median {statistics.median(v['ttft']):7.3f} ms  TPOT median {statistics.median(v['tpot']):7.3f} ms"
    )
print("ort tokens == torch tokens:", res["ort-cpu"]["tok"] == res["torch"]["tok"])
print(
    "int8 free-running tokens == float:",
    sum(a == b for a, b in zip(res["ort-cpu-int8"]["tok"], res["ort-cpu"]["tok"])),
    "/",
    sc.new_tokens,
)
f, q = res["ort-cpu"], res["ort-cpu-int8"]
print(
    f"int8/float speed ratio: TTFT {statistics.median(f['ttft']) / statistics.median(q['ttft']):.2f}x  TPOT {statistics.median(f['tpot']) / statistics.median(q['tpot']):.2f}x (>1 = int8 faster)"
)
