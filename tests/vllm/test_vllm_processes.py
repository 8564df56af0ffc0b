"""vLLM process hygiene: a worker killed mid-cell fails the cell with "vLLM worker died" and its signal, and a load()
that fails after the engine started ends the engine's processes itself. That close() ends every engine process is
checked on the engine test_vllm_backend.py's tiny-opt test starts anyway (one engine start fewer).

Each test starts its own engine (~10-20 s on 2 CPU cores); nothing here relies on a fixture for cleanup, as in the
worker processes that will run cells.
"""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("vllm", reason="vllm is not installed")
psutil = pytest.importorskip("psutil")

from test_vllm_backend import _children  # noqa: E402  (tests/vllm is on sys.path: prepend import mode)

from perfsuite.facts import models  # noqa: E402
from perfsuite.facts.cells import Cell, Scenario  # noqa: E402
from perfsuite.measure.backends import create  # noqa: E402
from perfsuite.measure.backends.vllm_backend import VllmBackend, VllmWorkerDied  # noqa: E402

pytestmark = pytest.mark.slow  # each test starts a vLLM engine (~10-20 s on 2 cores): the slow tier

P, N = 16, 8


def _cell() -> Cell:
    return Cell("vllm", "tiny-llama", "float32", Scenario("t", 1, P, N), model_dir=models.resolve("tiny-llama").path)


def test_worker_killed_mid_cell_says_worker_died():
    """Issue 9. Before: `AssertionError: collective_rpc should not be called on follower node` (or `RuntimeError:
    cancelled`), nothing about a worker. Now: VllmWorkerDied naming the worker, its pid and the signal."""
    before = _children()
    be = create(_cell())
    be.load()
    try:
        res = be.prefill(models.prompts(1, P, models.resolve("tiny-llama").vocab_size))
        worker = be.info()["engine_pids"][0]
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(VllmWorkerDied) as info:
            for _ in range(N - 1):
                res = be.decode(res.state)
        msg = str(info.value)
        assert msg.startswith("vLLM worker died: ")
        assert f"(pid {worker}) was killed by signal SIGKILL" in msg, msg
        assert "VllmWorker" in msg and "vLLM then raised" in msg
    finally:
        be.close()
    assert be.engine_processes_alive() == []
    assert _children() == before


class _FailsAfterStart(VllmBackend):
    """load() fails once the engine runs (as the async-scheduling check or anything after the start can)."""

    def _describe(self, *args, **kwargs):  # called right after the engine started
        self.started_pids = list(self._procs.pids)
        raise RuntimeError("injected failure after the engine started")


def test_load_failing_after_engine_start_ends_its_processes():
    """Issue 9. Before: load() raised after the engine started and before the fixture's try/finally, and the
    worker processes outlived the cell. Now load() shuts the engine down and waits for them before re-raising."""
    before = _children()
    be = _FailsAfterStart(_cell())
    with pytest.raises(RuntimeError, match="injected failure after the engine started"):
        be.load()
    assert be.started_pids, "the engine had started its worker"
    assert be.engine is None
    alive = [pid for pid in be.started_pids if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert _children() == before
