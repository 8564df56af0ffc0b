"""benchmarks/serve_agreement.py alternates which client runs first (ABBA), so the drift of a shared machine and
the cost of a position in the pair do not always fall on the same client."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_agreement.py"


def test_pairs_alternate_abba():
    spec = importlib.util.spec_from_file_location("serve_agreement", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    orders = [mod.order(k) for k in range(4)]
    assert orders == [("perfsuite", "vllm"), ("vllm", "perfsuite")] * 2
    assert sum(o[0] == "perfsuite" for o in orders) == 2  # each client first in half the pairs
