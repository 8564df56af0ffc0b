"""A zygote shared by two trees (perfsuite.measure.worker.zygote, pool.pair_pools): each child runs its request's tree,
two children run at once and their ends are told apart by pid. The trees here are minimal packages whose
``perfsuite.measure.worker.child.run_job`` only reports where it was imported from; no model, no timing."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from perfsuite.measure.worker import pool
from perfsuite.measure.worker.zygote import Zygote

CHILD = '''import os, time
import perfsuite

def run_job(job, workdir):
    time.sleep(job.get("sleep", 0))
    return {"perfsuite_file": perfsuite.__file__, "pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
            "pythonpath": os.environ.get("PYTHONPATH", "")}
'''


def fake_tree(root: Path) -> Path:
    (root / "perfsuite" / "measure" / "worker").mkdir(parents=True)
    for pkg in ("", "measure", "measure/worker"):
        (root / "perfsuite" / pkg / "__init__.py").write_text("")
    (root / "perfsuite" / "measure" / "worker" / "child.py").write_text(CHILD)
    return root


def test_children_of_one_zygote_run_their_own_trees_at_once(tmp_path: Path) -> None:
    trees = {s: fake_tree(tmp_path / s) for s in ("a", "b")}
    here = pool.this_side()
    z = Zygote(pool.Side(here.tree, sys.executable, "AB"), tmp_path, (), shared=True)
    try:
        pids = {}
        for s, sleep in (("a", 1.0), ("b", 0.0)):  # A still runs when B ends: B's end comes first
            job = tmp_path / f"{s}.job.json"
            job.write_text(json.dumps({"sleep": sleep}))
            pids[s] = z.fork(job, tmp_path / f"{s}.out.json", tmp_path / f"{s}.log", trees[s])
        t0 = time.monotonic()
        assert z.exit_status(pids["a"], 30) == 0  # the other child's end is kept for its own caller
        assert time.monotonic() - t0 > 0.3
        assert z.exit_status(pids["b"], 0.01) == 0
        assert z.proc is not None
        for s in ("a", "b"):
            out = json.loads((tmp_path / f"{s}.out.json").read_text())
            assert Path(out["perfsuite_file"]).is_relative_to(trees[s]), out
            assert out["ppid"] == z.proc.pid and out["pid"] == pids[s]
            assert Path(out["cwd"]) == trees[s]
            assert out["pythonpath"].split(":")[0] == str(trees[s])
            assert str(here.tree) not in out["pythonpath"].split(":")
    finally:
        z.close()
    assert z.proc is None


def test_an_unfinished_child_is_a_timeout_not_a_hang(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path / "a")
    z = Zygote(pool.Side(pool.this_side().tree, sys.executable, "AB"), tmp_path, (), shared=True)
    try:
        job = tmp_path / "j.json"
        job.write_text(json.dumps({"sleep": 5}))
        pid = z.fork(job, tmp_path / "o.json", tmp_path / "l.log", tree)
        assert z.exit_status(pid, 0.2) is None
    finally:
        z.close()


@pytest.mark.parametrize(("a_env", "why"), [((("X", "1"),), "environments differ"), ((), "")])
def test_pair_pools_share_only_what_can_be_shared(tmp_path: Path, a_env: tuple[tuple[str, str], ...],
                                                  why: str) -> None:
    here = pool.this_side()
    sides = {"a": pool.Side(here.tree, sys.executable, "A", a_env), "b": pool.Side(here.tree, sys.executable, "B")}
    pools, line = pool.pair_pools(sides, {}, ("torch", "perfsuite.measure.loop"))
    try:
        assert (pools["a"].zygote is pools["b"].zygote) == (not why)
        assert (why in line) if why else ("one for both sides" in line)
        if not why:  # a shared zygote preloads no perfsuite module: the children import their own trees'
            assert pools["a"].zygote.preload == ("torch",)
    finally:
        for pl in pools.values():
            pl.close()
    per_side, line = pool.pair_pools(sides, {}, (), "per-side")
    assert per_side["a"].zygote is not per_side["b"].zygote and "--zygote per-side" in line
    for pl in per_side.values():
        pl.close()
