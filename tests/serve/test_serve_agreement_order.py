"""benchmarks/serve_agreement.py alternates which client runs first (ABBA), so the drift of a shared machine and
the cost of a position in the pair do not always fall on the same client."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_agreement.py"


def _script():
    spec = importlib.util.spec_from_file_location("serve_agreement", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pairs_alternate_abba():
    mod = _script()
    orders = [mod.order(k) for k in range(4)]
    assert orders == [("perfsuite", "vllm"), ("vllm", "perfsuite")] * 2
    assert sum(o[0] == "perfsuite" for o in orders) == 2  # each client first in half the pairs


def test_the_within_pair_ratio_cancels_drift_between_pairs():
    """A server that slows by half between pairs moves both runs of a pair: the within-pair ratio stays at the
    clients' own 2 % difference, with an interval as narrow as the within-pair jitter, not the server's swing."""
    mod = _script()
    server = [50.0, 50.0, 75.0, 75.0, 50.0, 75.0]
    jitter = [1.0, 1.001, 0.999, 1.0, 1.002, 0.998]
    ours = [s * 1.02 * j for s, j in zip(server, jitter, strict=True)]
    r = mod.paired_ratio(ours, server)
    assert abs(r["ratio"] - 1.02) < 0.002 and r["ci95"][0] < r["ratio"] < r["ci95"][1] and r["pairs"] == 6
    assert r["ci95"][1] - r["ci95"][0] < 0.01
    assert mod.paired_ratio([50.0], [49.0])["ci95"] is None  # one pair: no interval
