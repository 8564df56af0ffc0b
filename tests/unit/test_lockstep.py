"""Lockstep pairs (perfsuite.measure.lockstep): the two workers of a pair take turns generation by generation. Fake
workers in threads check the protocol (no timing asserted); one pair of real worker processes checks the path
through perfsuite.measure.scheduler.measure_pair and that it leaves no process and no socket folder behind."""

from __future__ import annotations

import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from perfsuite.measure import lockstep
from perfsuite.measure import loop as measure
from perfsuite.measure.backends.base import StepBackend, StepResult


class _Backend(StepBackend):
    """A fake backend that logs when each of its calls starts and ends (into a log shared by both sides)."""

    def __init__(self, side: str, log: list[tuple[str, str]], lock: threading.Lock) -> None:
        self.side, self.log, self.lock = side, log, lock

    def _call(self) -> StepResult:
        with self.lock:
            self.log.append(("start", self.side))
        time.sleep(0.001)
        with self.lock:
            self.log.append(("end", self.side))
        return StepResult([7], None)

    def prefill(self, prompts: Any) -> StepResult:
        return self._call()

    def decode(self, state: Any) -> StepResult:
        return self._call()

    def release(self, state: Any) -> None:
        pass


def _worker(side: str, address: str, log: list[tuple[str, str]], lock: threading.Lock, gens: int, warm: int,
            out: dict[str, Any]) -> None:
    gate = lockstep.Gate.connect(address)
    try:
        out[side] = measure.measure_generations(_Backend(side, log, lock), [[1, 2]], 3, gens, warm, ["e2el"],
                                                turn=gate.turn)
    finally:
        gate.close()


def _pair(gens: int = 3, warm: int = 1, seed: int = 0) -> tuple[list[tuple[str, str]], list[str], dict[str, Any]]:
    log: list[tuple[str, str]] = []
    lock = threading.Lock()
    out: dict[str, Any] = {}
    with lockstep.Conductor(["a", "b"]) as cond:
        threads = {s: threading.Thread(target=_worker, args=(s, cond.address(s), log, lock, gens, warm, out))
                   for s in ("a", "b")}
        for t in threads.values():
            t.start()
        ready = cond.wait_ready(lambda s: not threads[s].is_alive(), timeout_s=30)
        assert ready == ["a", "b"]
        orders = cond.run_rounds({"a": gens + warm, "b": gens + warm}, random.Random(seed))
        cond.release()
        for t in threads.values():
            t.join(timeout=30)
    return log, orders, out


def test_the_sides_take_turns_one_generation_at_a_time() -> None:
    log, orders, out = _pair(gens=3, warm=1)
    # never two calls at once: every start is followed by its own end
    assert all(log[i][0] == "start" and log[i + 1] == ("end", log[i][1]) for i in range(0, len(log), 2))
    # a turn is one whole generation (a prefill and 2 decodes = 3 calls) of one side
    sides = [s for kind, s in log[::2]]
    turns = [sides[i:i + 3] for i in range(0, len(sides), 3)]
    assert all(len(set(t)) == 1 for t in turns) and len(turns) == 8
    assert [t[0] for t in turns] == [s.lower() for o in orders for s in o]
    assert all(sorted(o) == ["A", "B"] for o in orders) and len(orders) == 4
    assert {s: len(m["e2el"].samples["e2el_ms"]) for s, m in out.items()} == {"a": 3, "b": 3}  # warm-up untimed


def test_the_order_of_each_round_is_a_coin_flip() -> None:
    _, orders, _ = _pair(gens=60, warm=0, seed=5)
    assert 15 <= orders.count("AB") <= 45 and set(orders) == {"AB", "BA"}


def test_a_side_that_ends_before_its_first_generation_is_left_out() -> None:
    """A skip or a failed load: the worker connects (or not) and ends; the other side is not kept waiting."""
    with lockstep.Conductor(["a", "b"]) as cond:
        quitter = lockstep.Gate.connect(cond.address("a"))
        quitter.close()
        stayer = lockstep.Gate.connect(cond.address("b"))
        t = threading.Thread(target=stayer.turn)
        t.start()
        assert cond.wait_ready(lambda s: s == "a", timeout_s=30) == ["b"]
        cond.release()
        t.join(timeout=30)
        assert not stayer.active  # released: it runs freely


def test_a_side_dying_mid_run_stops_the_rounds_with_its_name() -> None:
    with lockstep.Conductor(["a", "b"]) as cond:
        gates = {s: lockstep.Gate.connect(cond.address(s)) for s in ("a", "b")}

        def a_dies_after_one() -> None:
            gates["a"].turn()
            gates["a"].turn()
            gates["a"].close()

        ta = threading.Thread(target=a_dies_after_one)
        tb = threading.Thread(target=lambda: [gates["b"].turn() for _ in range(5)])
        ta.start()
        tb.start()
        assert cond.wait_ready(lambda s: False, timeout_s=30) == ["a", "b"]
        with pytest.raises(lockstep.LockstepError, match="side A stopped taking turns"):
            cond.run_rounds({"a": 4, "b": 4}, random.Random(1))
        cond.release()
        ta.join(timeout=30)
        tb.join(timeout=30)
        assert not tb.is_alive()


def test_a_gate_with_no_coordinator_runs_freely(tmp_path: Path) -> None:
    gate = lockstep.Gate.connect(str(tmp_path / "nobody"), timeout_s=1)
    assert not gate.active
    gate.turn()  # returns at once
    assert not lockstep.Gate.connect(None).active


def test_which_trees_can_take_turns() -> None:
    from perfsuite.orchestrate import abloop

    assert abloop.pairing("lockstep", {"a": {"lockstep": 1}, "b": {"lockstep": 1}})[0] is True
    on, line = abloop.pairing("lockstep", {"a": {"protocol": 1}, "b": {"lockstep": 1}})
    assert on is False and "side A's tree predates lockstep pairs" in line and "perfsuite run --update-baselines" in line
    assert abloop.pairing("sequential", {"a": {"lockstep": 1}, "b": {"lockstep": 1}})[0] is False


def test_a_lockstep_failure_is_one_usage_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A side that never gets ready (wait_ready's timeout) or stops taking turns ends `perfsuite ab` and the
    confirmation with one line naming the pair and the way to see that side's error, not a traceback."""
    from perfsuite.facts.errors import UsageError
    from perfsuite.measure import scheduler
    from perfsuite.orchestrate import abloop

    def hung(pools: object, jobs: object, rng: object) -> None:
        raise lockstep.LockstepError("side(s) b not ready after 1800 s")

    monkeypatch.setattr(scheduler, "measure_pair", hung)
    cell = {"id": "torch-tiny", "backend": "torch", "model": "tiny-llama", "dtype": "float32",
            "scenario": {"name": "short", "batch_size": 1, "prompt_tokens": 64, "new_tokens": 32}}
    plans = {s: {"generations": 2, "warmup_generations": 1} for s in ("a", "b")}
    with pytest.raises(UsageError, match=r"pair 3, torch-tiny: the lockstep pair failed: side\(s\) b not ready "
                                         r"after 1800 s; run the A/B with --pairs sequential"):
        abloop.measure_lockstep({}, cell, plans, 3, ["tpot"], random.Random(1))


@pytest.mark.slow  # two zygotes importing torch and a pair of real workers (~10 s on 2 cores): end to end
def test_a_real_pair_takes_turns_and_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    from perfsuite.measure.worker import pool
    from perfsuite.orchestrate import abloop

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    plan = pool.plan(pool.this_side(), {"profile": "smoke", "backend": "torch"})
    cell = plan["cells"][0]
    plans = {s: {**plan, "generations": 2, "warmup_generations": 1} for s in ("a", "b")}
    pools = {s: pool.Pool(pool.this_side(s.upper()), preload=pool.preload_modules({"torch"})) for s in ("a", "b")}
    try:
        order, got, rounds = abloop.measure_lockstep(pools, cell, plans, 1, ["e2el"], random.Random(2))
        assert sorted(order) == ["a", "b"] and len(rounds) == 3 and all(sorted(r) == ["A", "B"] for r in rounds)
        assert {s: len(r.metrics["e2el"].samples["e2el_ms"]) for s, r in got.items()} == {"a": 2, "b": 2}
        assert got["a"].pid != got["b"].pid
        pids = [got["a"].pid, got["b"].pid]
    finally:
        for p in pools.values():
            p.close()
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not list(tmp_path.glob("psl-*")) and not list(tmp_path.glob("perfsuite-workers-*"))


_SIDE = r"""
import os, subprocess, sys, time
from pathlib import Path
from perfsuite.measure.lockstep import Gate
address, others, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # an engine's worker: same group
gate = Gate.connect(address)
seen = []
for _ in range(3):
    gate.turn()
    pids = [int(p) for p in others.read_text().split()]  # the other side's worker and its child
    seen.append(" ".join(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] for p in pids))
gate.turn()
out.write_text(f"{os.getpid()} {child.pid}\n" + "\n".join(seen))
child.kill()
child.wait()
"""


def test_a_frozen_pair_stops_the_waiting_side_and_its_children(tmp_path: Path) -> None:
    """vLLM pairs (scheduler.freezes): while one side runs a generation, the other side's whole process group is
    stopped (state T), its engine's processes included; after the release nothing stays stopped."""
    import subprocess
    import sys

    from perfsuite.measure import scheduler

    assert scheduler.freezes("vllm") and scheduler.freezes("vllm-llm") and not scheduler.freezes("torch")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    with lockstep.Conductor(["a", "b"], freeze=True) as cond:
        for s, o in (("a", "b"), ("b", "a")):
            procs[s] = subprocess.Popen([sys.executable, "-c", _SIDE, cond.address(s), str(tmp_path / f"{o}.pids"),
                                         str(tmp_path / f"{s}.out")], start_new_session=True)
            cond.track(s, procs[s].pid)
        assert cond.wait_ready(lambda s: procs[s].poll() is not None, timeout_s=60) == ["a", "b"]
        for s in ("a", "b"):  # both loaded and waiting: both frozen
            assert psutil_status(procs[s].pid) == "T"
            kids = [c.pid for c in __import__("psutil").Process(procs[s].pid).children()]
            (tmp_path / f"{s}.pids").write_text(" ".join(map(str, [procs[s].pid, *kids])))
        cond.run_rounds({"a": 3, "b": 3}, random.Random(3))
        cond.release()
        for p in procs.values():
            assert p.wait(timeout=60) == 0
    for s in ("a", "b"):
        lines = (tmp_path / f"{s}.out").read_text().splitlines()
        assert [line.split() for line in lines[1:]] == [["T", "T"]] * 3  # the other side and its child, each turn


def psutil_status(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
