"""Record real profile pairs for the operator diff's tests (tests/unit/data/opdiff/*.json) and print each diff.

Three cases, each ``--pairs`` pairs of fresh processes (A then B, or B then A by a coin flip), tiny-llama float32
b1-p64-n32 on the CPU, through perfsuite/measure/opprofile.py (the same driver the confirmation uses):

* eager: B loads the model with eager attention instead of SDPA (the cell's attn_implementation);
* no_grad: B is a copy of this tree whose torch backend decodes under torch.no_grad() instead of inference_mode();
* aa: A and B are this tree, same cell (noise only);
* sleep: B is a copy of this tree whose decode step sleeps 2 ms: a change outside any operator's time.

    python benchmarks/opdiff_fixtures.py --pairs 4 --out tests/unit/data/opdiff [--cases sleep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfsuite.facts.cells import Cell, Scenario  # noqa: E402
from perfsuite.verdict import opdiff  # noqa: E402


def profile(tree: Path, cell: Cell, work: Path, label: str) -> dict:
    job, out = work / f"{label}.job.json", work / f"{label}.out.json"
    job.write_text(json.dumps({"cell": cell.as_dict(), "generations": 3, "warmup": 1,
                               "trace": str(work / f"{label}.trace.json")}))
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    subprocess.run([sys.executable, str(tree / "perfsuite/measure/opprofile.py"), str(job), str(out)], env=env,
                   check=True, capture_output=True)
    data = json.loads(out.read_text())
    data.pop("trace", None)
    return data


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "tests/unit/data/opdiff")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", default="eager,no_grad,aa,sleep", help="comma-separated cases to record")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sdpa = Cell("torch", "tiny-llama", "float32", Scenario("short", 1, 64, 32))
    eager = Cell("torch", "tiny-llama", "float32", Scenario("short", 1, 64, 32), attn_implementation="eager")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ng = work / "no_grad_tree"
        shutil.copytree(ROOT / "perfsuite", ng / "perfsuite", ignore=shutil.ignore_patterns("__pycache__"))
        tb = ng / "perfsuite/measure/backends/torch_backend.py"
        src = tb.read_text()
        assert "@torch.inference_mode()" in src
        tb.write_text(src.replace("@torch.inference_mode()", "@torch.no_grad()"))
        sl = work / "sleep_tree"
        shutil.copytree(ROOT / "perfsuite", sl / "perfsuite", ignore=shutil.ignore_patterns("__pycache__"))
        tb = sl / "perfsuite/measure/backends/torch_backend.py"
        decode = "    def decode(self, state: _State) -> StepResult:\n"
        assert decode in tb.read_text()
        tb.write_text(tb.read_text().replace(decode, decode + "        __import__('time').sleep(0.002)\n"))
        cases = {"eager": ((ROOT, sdpa), (ROOT, eager)), "no_grad": ((ROOT, sdpa), (ng, sdpa)),
                 "aa": ((ROOT, sdpa), (ROOT, sdpa)), "sleep": ((ROOT, sdpa), (sl, sdpa))}
        cases = {k: v for k, v in cases.items() if k in args.cases.split(",")}
        args.out.mkdir(parents=True, exist_ok=True)
        for name, (a, b) in cases.items():
            pairs = []
            for i in range(args.pairs):
                order = rng.choice(("AB", "BA"))
                got = {s: profile(*(a if s == "A" else b), work, f"{name}{i}{s}") for s in order}
                pairs.append({"order": order, "A": got["A"], "B": got["B"]})
            (args.out / f"{name}.json").write_text(json.dumps(
                {"case": name, "cell": sdpa.id, "source": "benchmarks/opdiff_fixtures.py", "pairs": pairs}, indent=0))
            d = opdiff.diff([(p["A"], p["B"]) for p in pairs])
            print(f"== {name}: {d.verdict}")
            print("\n".join(opdiff.lines(d)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
