import sys, time, random, tempfile, json
from pathlib import Path
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure.worker.pool import Side
from perfsuite.orchestrate.opdiff_run import operator_diff
from perfsuite.verdict.opdiff import lines
cell = Cell("torch", "tiny-llama", "float32", Scenario("default", 1, 64, 32)).as_dict()
sides = {"a": Side(Path("/tmp/od/A"), label="A"), "b": Side(Path(sys.argv[1]), label="B")}
with tempfile.TemporaryDirectory() as tmp:
    t = time.monotonic()
    d = operator_diff(sides, cell, 1.06, Path(tmp), None, say=print, rng=random.Random(int(sys.argv[2])))
    print(f"WALL {time.monotonic()-t:.1f}")
    print("\n".join(lines(d)[:5]))
