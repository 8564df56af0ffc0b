"""``perfsuite ab`` runs each side's own code: two tiny trees that differ only in their torch decode step (B sleeps
20 ms per step, real code in B's tree), one interpreter for both. ab must find B slower, every worker of a side
must have imported perfsuite from that side's tree, and each pair's recorded A/B order must be the order it ran
in."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_ab_cli import make_tree  # tests/unit is on sys.path (rootdir conftest, prepend import mode)

from perfsuite.cli import main as cli

pytestmark = pytest.mark.slow

DECODE = "    def decode(self, state: _State) -> StepResult:\n"


def test_each_side_runs_its_own_tree(tmp_path: Path) -> None:
    a = make_tree(tmp_path / "a")
    b = make_tree(tmp_path / "b")
    for tree, extra in ((a, ""), (b, "        __import__('time').sleep(0.02)\n")):
        backend = tree / "perfsuite" / "measure" / "backends" / "torch_backend.py"
        src = backend.read_text()
        assert DECODE in src
        seen = tmp_path / f"hash-seeds-{tree.name}"  # each worker notes the hash seed its zygote started with
        note = (f"        open({str(seen)!r}, 'a').write(__import__('os').environ.get('PYTHONHASHSEED', '-') + "
                "'\\n')\n")
        parent = tmp_path / f"parents-{tree.name}"  # and the zygote it was forked from
        note += f"        open({str(parent)!r}, 'a').write(str(__import__('os').getppid()) + '\\n')\n"
        backend.write_text(src.replace(DECODE, DECODE + note + extra))
    out = tmp_path / "ab.json"
    rc = cli(["ab", "--a", str(a), "--b", str(b), "--budget", "4m", "--json", str(out), "--operators", "3"])
    data = json.loads(out.read_text())
    why = {k: data.get(k) for k in ("stopped", "reason", "error", "verdicts", "elapsed_s", "zygote")}
    assert rc == 1 and data["stopped"] == "regression", (rc, why)
    # one hash seed for both sides' zygotes, drawn for this run (perfsuite.machine.cotenant.hash_seed_env)
    assert data["hash_seed"] and set((tmp_path / "hash-seeds-a").read_text().split()) == {data["hash_seed"]}
    assert set((tmp_path / "hash-seeds-b").read_text().split()) == {data["hash_seed"]}
    # one zygote for both sides (perfsuite.measure.worker.zygote): every worker of A and of B is its child, and still runs
    # its own side's tree (perfsuite_file below)
    assert data["zygote"] == "shared", why
    # after the decision, the regressed cell's operator diff: 3 profile pairs, each run a fresh process of its side's
    # tree started by the coordinator (this process), never timed; the timed workers are the zygote's children
    ops = data["operators"]["torch-tiny-llama-float32-b1-p8-n4"]
    # B's change is a sleep, in no operator's time: said so, or spread when the profile pairs are too noisy to tell;
    # never put on one operator
    assert ops["verdict"] in ("outside", "spread") and len(ops["rows"]) > 0, ops
    me = str(os.getpid())
    parents = {side: set((tmp_path / f"parents-{side}").read_text().split()) for side in "ab"}
    assert me in parents["a"] and me in parents["b"], parents
    parents = {side: got - {me} for side, got in parents.items()}
    assert len(parents["a"]) == 1 and parents["a"] == parents["b"], parents
    tpot = next(v for v in data["verdicts"] if v["metric"] == "median_tpot_ms")
    assert tpot["kind"] == "regression" and tpot["ratio"] > 1
    assert data["pairs"]
    for pair in data["pairs"]:
        assert Path(pair["perfsuite_file"]["A"]).is_relative_to(a)
        assert Path(pair["perfsuite_file"]["B"]).is_relative_to(b)
        # the recorded order is the order the sides ran in: each measurement forks a fresh worker, so the side
        # that ran first has the lower pid (pids are handed out in increasing order)
        assert pair["order"] in ("AB", "BA")
        first, second = pair["order"]
        assert pair["pid"][first] < pair["pid"][second], pair
        # B's tree sleeps 20 ms in every decode step and A's does not: B's TPOT is at least that, whatever the load
        tpots = [v for k, v in pair["values"].items() if k.endswith(":median_tpot_ms")]
        assert tpots and all(v["B"] >= 19.9 for v in tpots), pair
    assert not (a / "baselines").exists() and not (b / "baselines").exists()


def test_the_budget_covers_the_start_and_is_overrun_by_less_than_a_pair(tmp_path: Path) -> None:
    """A/A on two copies of one tree with a budget barely above ab's own start (probes, plans, the zygotes): the
    start is counted in the budget and the last pair started ends less than one pair's wall time past it."""
    a, b = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    out = tmp_path / "ab.json"
    rc = cli(["ab", "--a", str(a), "--b", str(b), "--budget", "40s", "--json", str(out)])  # the start: ~10 s quiet
    data = json.loads(out.read_text())
    assert rc in (0, 1) and data["stopped"] in ("budget", "decided", "regression"), data["stopped"]
    assert 0 < data["setup_s"] < data["elapsed_s"] and data["pair_walls_s"]
    assert data["elapsed_s"] <= data["budget_s"] + max(data["pair_walls_s"]), (data["elapsed_s"], data["pair_walls_s"])
