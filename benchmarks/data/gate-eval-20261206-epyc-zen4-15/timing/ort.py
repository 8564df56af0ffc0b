import sys, time, json, tempfile
from pathlib import Path
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure.worker.pool import Side
from perfsuite.measure import opprofile
cell = Cell(sys.argv[1], "tiny-llama", "float32", Scenario("default", 1, 64, 32)).as_dict()
with tempfile.TemporaryDirectory() as tmp:
    t=time.monotonic()
    out = opprofile.run(Side(Path("/work/main")), cell, Path(tmp), "x", trace=True)
    print(f"{sys.argv[1]} wall {time.monotonic()-t:.1f}", out.get("tool"), out.get("error"), sum(out.get("ops",{}).values()), out.get("tokens"))
