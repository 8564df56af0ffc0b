"""``perfsuite ab`` runs each side's own code: two tiny trees that differ only in their torch decode step (B sleeps
20 ms per step, real code in B's tree), one interpreter for both. ab must find B slower, and every worker of a
side must have imported perfsuite from that side's tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ab_cli import make_tree  # tests/unit is on sys.path (rootdir conftest, prepend import mode)

from perfsuite.cli import main as cli

pytestmark = pytest.mark.slow

DECODE = "    def decode(self, state: _State) -> StepResult:\n"


def test_each_side_runs_its_own_tree(tmp_path: Path) -> None:
    a = make_tree(tmp_path / "a")
    b = make_tree(tmp_path / "b")
    backend = b / "perfsuite" / "backends" / "torch_backend.py"
    src = backend.read_text()
    assert DECODE in src
    backend.write_text(src.replace(DECODE, DECODE + "        __import__('time').sleep(0.02)\n"))
    out = tmp_path / "ab.json"
    rc = cli(["ab", "--a", str(a), "--b", str(b), "--budget", "4m", "--json", str(out)])
    data = json.loads(out.read_text())
    assert rc == 1 and data["stopped"] == "regression"
    tpot = next(v for v in data["verdicts"] if v["metric"] == "median_tpot_ms")
    assert tpot["kind"] == "regression" and tpot["ratio"] > 5
    for pair in data["pairs"]:
        assert Path(pair["perfsuite_file"]["A"]).is_relative_to(a)
        assert Path(pair["perfsuite_file"]["B"]).is_relative_to(b)
        assert sorted(pair["order"]) == ["A", "B"]
    assert {p["order"] for p in data["pairs"]} == {"AB", "BA"} or len(data["pairs"]) < 6  # coin flips
    assert not (a / "baselines").exists() and not (b / "baselines").exists()
