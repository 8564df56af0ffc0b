"""Server lifecycle: health wait, log tail on a failed start, timeout, port taken, death mid-load, Ctrl-C; after
each, no process of the server is left."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from perfsuite.measure.serving import datasets, metrics
from perfsuite.measure.serving.load import LoadSpec, run_load
from perfsuite.measure.serving.server import Server, ServerError, free_port

FAKE = Path(__file__).with_name("fake_server.py")


def fake(tmp_path: Path, mode: str = "ok", port: int | None = None, timeout_s: float = 30) -> Server:
    port = port or free_port()
    return Server([sys.executable, str(FAKE), str(port), mode], port=port, log_path=tmp_path / "server.log",
                  start_timeout_s=timeout_s, name="fake server")


def gone(pids) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_start_serve_stop_leaves_no_process(tmp_path):
    with fake(tmp_path) as s:
        assert s.alive() and len(s.pids) >= 2  # the server and its child
        res = run_load(s.base_url, "stub", datasets.random_requests(2, 4, 2, 2048),
                       LoadSpec("poisson", rate=100, num_requests=2, warmup=0))
        assert all(r.success for r in res.records)
        pids = set(s.pids)
    assert gone(pids) and not s.leftover()
    log = (tmp_path / "server.log").read_text()
    assert "listening on" in log
    # vLLM's engine-link sockets went to a folder of the server's own (not the shared temp folder), removed at stop
    rpc = Path(log.split("fake server: rpc ", 1)[1].split()[0])
    assert rpc.parent.name.startswith("perfsuite-rpc-") and not rpc.parent.exists()


def test_failed_start_fails_with_the_log_tail(tmp_path):
    s = fake(tmp_path, "fail")
    with pytest.raises(ServerError, match=r"exited with status 3(.|\n)*no such model"):
        s.start()
    assert gone(s.pids)


def test_never_healthy_times_out_and_leaves_nothing(tmp_path):
    s = fake(tmp_path, "hang", timeout_s=2)
    with pytest.raises(ServerError, match=r"did not become healthy .* within 2 s"):
        s.start()
    assert len(s.pids) >= 2 and gone(s.pids)


def test_port_taken_fails_the_start(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        s = fake(tmp_path, port=port, timeout_s=20)
        with pytest.raises(ServerError, match="exited with status"):
            s.start()
    assert "address already in use" in (tmp_path / "server.log").read_text().lower()
    assert gone(s.pids)


def test_server_dying_mid_load_fails_the_point_and_leaves_nothing(tmp_path):
    s = fake(tmp_path, "die-after-1.5")
    with s:
        def abort():
            try:
                s.check()
            except ServerError as exc:
                return str(exc).splitlines()[0]
            return None

        res = run_load(s.base_url, "stub", datasets.random_requests(40, 4, 8, 2048),
                       LoadSpec("constant", rate=10, num_requests=40, warmup=0), abort=abort)
        m = metrics.compute(res)
        assert res.aborted and "exited with status 1" in res.aborted
        assert metrics.failure(m, 0.1)
        pids = set(s.pids)
    assert gone(pids)


def test_ctrl_c_stops_the_server_and_its_children(tmp_path):
    port = free_port()
    script = textwrap.dedent(f"""
        import sys, time
        from perfsuite.measure.serving.server import Server
        s = Server([sys.executable, {str(FAKE)!r}, "{port}"], port={port}, log_path=__import__("pathlib").Path(
            {str(tmp_path / "s.log")!r}))
        with s:
            print("PIDS", *sorted(s.pids), flush=True)
            time.sleep(600)
    """)
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}) as p:
        line = p.stdout.readline()
        assert line.startswith("PIDS"), line
        pids = [int(x) for x in line.split()[1:]]
        assert len(pids) >= 2
        p.send_signal(signal.SIGINT)
        p.wait(30)
    assert gone(pids)


def test_killed_parent_takes_the_server_down(tmp_path):
    """SIGKILL of the process that started the server: no cleanup code runs, PR_SET_PDEATHSIG does it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux only")
    port = free_port()
    script = textwrap.dedent(f"""
        import sys, time
        from perfsuite.measure.serving.server import Server
        s = Server([sys.executable, {str(FAKE)!r}, "{port}"], port={port}, log_path=__import__("pathlib").Path(
            {str(tmp_path / "s.log")!r}))
        s.start()
        print("PIDS", s.proc.pid, flush=True)
        time.sleep(600)
    """)
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}) as p:
        server_pid = int(p.stdout.readline().split()[1])
        child = psutil.Process(server_pid).children()[0].pid
        p.kill()
        p.wait(10)
    assert gone([server_pid, child])
    # the server's socket folder, which a parent killed this way cannot remove: this test removes it
    rpc = Path((tmp_path / "s.log").read_text().split("fake server: rpc ", 1)[1].split()[0]).parent
    assert rpc.name.startswith("perfsuite-rpc-")
    shutil.rmtree(rpc)


def test_a_foreign_server_on_the_port_is_not_taken_for_ours(tmp_path):
    """Another process already answers /health on the port: ours fails to bind and the start fails, instead of
    measuring the foreign server."""
    from serve_stub import Stub

    with Stub() as other:
        s = fake(tmp_path, port=other.port, timeout_s=20)
        with pytest.raises(ServerError, match="exited with status"):
            s.start()
    assert gone(s.pids)


def test_vllm_env_leaves_the_last_core_to_the_client(monkeypatch):
    from perfsuite.measure.serving.server import vllm_env

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert vllm_env(cpus=[0, 1])["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert vllm_env(cpus=[0, 1, 2, 3])["VLLM_CPU_OMP_THREADS_BIND"] == "0-2"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in vllm_env(cpus=[0])  # one core: vLLM's default
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # the user's choice wins
    assert vllm_env(cpus=[0, 1])["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to leave one out")
def test_server_process_tree_runs_on_the_cores_it_is_given(tmp_path):
    """The whole server (API process and every child) leaves the last core to the load generator, not just vLLM's
    engine threads: with only those bound, one API-process stall set the dispatch delay p99 at 13.9 ms."""
    from perfsuite.measure.serving.server import server_cpus

    cores = server_cpus()
    assert cores is not None and len(cores) == len(os.sched_getaffinity(0)) - 1
    port = free_port()
    srv = Server([sys.executable, str(FAKE), str(port), "ok"], port=port, log_path=tmp_path / "server.log",
                 start_timeout_s=30, name="fake server", cpus=cores)
    with srv:
        assert srv.proc is not None and sorted(os.sched_getaffinity(srv.proc.pid)) == cores
    assert sorted(os.sched_getaffinity(0)) != cores  # ours is unchanged


def test_server_cpus_defers_to_the_users_binding(monkeypatch):
    from perfsuite.measure.serving.server import server_cpus

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert server_cpus([0, 1, 2]) == [0, 1] and server_cpus([3]) is None
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert server_cpus([0, 1, 2]) is None
