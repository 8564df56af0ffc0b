"""The coordinator's side of process-replicated measurement: start workers from a source tree with an
interpreter, hand them jobs one at a time, collect what they measured. Nothing is timed here."""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from perfsuite.external import CANNOT_RUN, NOT_FOUND, TIMED_OUT, run_tool
from perfsuite.worker.job import PROTOCOL, ProcessResult


class SideError(Exception):
    """A side (tree + interpreter) that cannot run perfsuite workers; one line with the fix."""


@dataclass(frozen=True)
class Side:
    """Where worker processes come from: ``tree`` is the directory holding the ``perfsuite`` package they must
    import, ``python`` the interpreter that runs them."""

    tree: Path
    python: str = sys.executable
    label: str = ""
    env: tuple[tuple[str, str], ...] = ()

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(self.tree) + (os.pathsep + old if old else "")
        env.update(dict(self.env))
        return env


def this_side(label: str = "") -> Side:
    """The tree this coordinator's own perfsuite was imported from, with this interpreter."""
    import perfsuite

    return Side(Path(perfsuite.__file__).resolve().parent.parent, sys.executable, label)


def probe(side: Side, modules: tuple[str, ...] = (), timeout_s: float = 300) -> dict[str, Any]:
    """Ask the side's interpreter where it imports perfsuite from (and whether it can import ``modules``); refuse a
    side that imports another tree or lacks what its workers need."""
    name = f"side {side.label}" if side.label else "worker"
    if not Path(side.python).exists() and "/" in side.python:
        raise SideError(f"{name}: interpreter {side.python} does not exist; pass an existing python (e.g. "
                        f"{side.tree}/.venv/bin/python)")
    proc = run_tool([side.python, "-m", "perfsuite.worker", "probe", *modules], timeout_s, cwd=side.tree,
                    env=side.environ())
    if proc.rc in (NOT_FOUND, CANNOT_RUN, TIMED_OUT) and proc.problem:
        raise SideError(f"{name}: cannot run {side.python}: {proc.problem}")
    if proc.rc != 0:
        tail = proc.problem or (proc.stderr.strip().splitlines() or ["no output"])[-1]
        _raise_if_syntax(name, side, tail)
        raise SideError(f"{name}: {side.python} cannot run perfsuite's worker from {side.tree} ({tail}); install "
                        f"perfsuite's dependencies into that interpreter (scripts/install.sh) or pass another python")
    try:
        facts = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        raise SideError(f"{name}: unreadable probe output from {side.python}: {proc.stdout[-200:]!r}") from None
    where = Path(facts.get("perfsuite_file", "")).resolve()
    if side.tree.resolve() not in where.parents:
        raise SideError(f"{name}: {side.python} imports perfsuite from {where.parent}, not from {side.tree}; run "
                        "each side from its own tree (an interpreter whose site-packages shadow the tree cannot "
                        "compare code)")
    bad = dict(facts.get("import_errors") or {})
    if bad:
        mod, err = next(iter(bad.items()))
        _raise_if_syntax(name, side, err)
        raise SideError(f"{name}: {side.python} cannot import {mod} ({err}); install perfsuite's dependencies into "
                        "that interpreter (scripts/install.sh) or pass another --a-python/--b-python")
    if facts.get("protocol") != PROTOCOL:
        raise SideError(f"{name}: worker protocol {facts.get('protocol')} in {side.tree}, this perfsuite speaks "
                        f"{PROTOCOL}; update that tree")
    return facts


_SYNTAX = ("SyntaxError", "IndentationError", "TabError")


def _raise_if_syntax(name: str, side: Side, text: str) -> None:
    """A tree that does not compile is that tree's bug, not a missing dependency: name the file and line (found by
    compiling the tree's package here, whatever the side's interpreter printed) and that fix."""
    if not any(t in text for t in _SYNTAX):
        return
    for f in sorted((side.tree / "perfsuite").rglob("*.py")):
        try:
            compile(f.read_bytes(), str(f), "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise SideError(f"{name}: {f}, line {exc.lineno}: {type(exc).__name__}: {exc.msg}; fix the syntax error "
                            "in that tree") from None
        except (OSError, ValueError):
            continue
    raise SideError(f"{name}: {text}; fix the syntax error in {side.tree}")


def _signal_text(status: int) -> str:
    if status < 0:
        try:
            return f"killed by signal {-status} ({signal.Signals(-status).name})"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


class Pool:
    """Worker processes of one side. ``fork`` jobs run in children of one pre-imported zygote (cheap: ~0.1 s
    plus the model load); ``spawn`` jobs run in a fresh interpreter each (vLLM, which must not be forked)."""

    def __init__(self, side: Side, workdir: Path | None = None, preload: tuple[str, ...] = ()) -> None:
        self.side = side
        # A folder of our own making goes on close() unless a failure (named with it) keeps it.
        self._owned = workdir is None
        self.keep = False
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="perfsuite-workers-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.preload = preload
        self._zygote: subprocess.Popen[str] | None = None
        self._sel: selectors.BaseSelector | None = None
        self._buf = ""
        self._count = 0
        self.current_pid: int | None = None

    # ------------------------------------------------------------------------------------------------ zygote
    def _start_zygote(self) -> None:
        log = open(self.workdir / f"zygote{self.side.label}.log", "a")
        self._zygote = subprocess.Popen([self.side.python, "-m", "perfsuite.worker", "serve"], cwd=self.side.tree,
                                        env=self.side.environ(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=log, text=True, bufsize=1, start_new_session=True)
        log.close()
        self._sel = selectors.DefaultSelector()
        assert self._zygote.stdout is not None
        os.set_blocking(self._zygote.stdout.fileno(), False)
        self._sel.register(self._zygote.stdout, selectors.EVENT_READ)
        self._send({"op": "preload", "modules": list(self.preload)})
        self._recv(timeout_s=600)

    def _send(self, msg: dict[str, Any]) -> None:
        assert self._zygote is not None and self._zygote.stdin is not None
        self._zygote.stdin.write(json.dumps(msg) + "\n")
        self._zygote.stdin.flush()

    def _recv(self, timeout_s: float) -> dict[str, Any] | None:
        """Next reply, or None on timeout. A dead zygote is an error with its log."""
        assert self._zygote is not None and self._sel is not None
        stream: IO[str] = self._zygote.stdout  # type: ignore[assignment]
        deadline = time.monotonic() + timeout_s
        while "\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self._sel.select(timeout=min(left, 1.0)):
                chunk = stream.read()
                if chunk == "" and self._zygote.poll() is not None:
                    log = _tail(self.workdir / f"zygote{self.side.label}.log")
                    raise SideError(f"worker zygote of {self.side.tree} {_signal_text(self._zygote.returncode)}:"
                                    f" {log.strip().splitlines()[-1] if log.strip() else 'no output'}")
                self._buf += chunk or ""
            elif self._zygote.poll() is not None:
                raise SideError(f"worker zygote of {self.side.tree} {_signal_text(self._zygote.returncode)}")
        line, self._buf = self._buf.split("\n", 1)
        return dict(json.loads(line))

    # ------------------------------------------------------------------------------------------------- jobs
    def measure(self, job: dict[str, Any], *, fork: bool = True, timeout_s: float = 1800,
                keep_failed: bool = True) -> ProcessResult:
        """One job in a fresh worker. A failure keeps this pool's folder and names it, unless ``keep_failed`` is
        off (a job whose failure the caller reports in full and only notes, such as the run-start peaks)."""
        res = self._measure(job, fork, timeout_s)
        if res.error and self._owned and keep_failed:
            self.keep = True
            res = dataclasses.replace(res, error=f"{res.error} (worker files kept in {self.workdir})")
        return res

    def _measure(self, job: dict[str, Any], fork: bool, timeout_s: float) -> ProcessResult:
        return self.start(job, fork=fork, timeout_s=timeout_s).finish()

    def start(self, job: dict[str, Any], *, fork: bool = True, timeout_s: float = 1800) -> Running:
        """Start one job in a fresh worker and return at once (a lockstep pair runs two at a time, one per pool);
        :meth:`Running.finish` collects it. A pool runs one job at a time."""
        self._count += 1
        stem = f"{self.side.label or 'w'}{self._count:04d}"
        job_path, out, log = (self.workdir / f"{stem}.job.json", self.workdir / f"{stem}.out.json",
                              self.workdir / f"{stem}.log")
        job_path.write_text(json.dumps(job))
        run = Running(self, job, out, log, timeout_s, time.perf_counter())
        if fork:
            if self._zygote is None or self._zygote.poll() is not None:
                self._start_zygote()
            self._send({"op": "measure", "job": str(job_path), "out": str(out), "log": str(log)})
            started = self._recv(timeout_s=120)
            if not started or started.get("event") != "started":
                raise SideError(f"worker zygote of {self.side.tree} did not start a child: {started}")
            run.pid = int(started["pid"])
        else:
            with open(log, "a") as fh:
                run.proc = subprocess.Popen([self.side.python, "-m", "perfsuite.worker", "run", str(job_path),
                                             str(out)], cwd=self.side.tree, env=self.side.environ(), stdout=fh,
                                            stderr=fh, stdin=subprocess.DEVNULL, start_new_session=True)
            run.pid = run.proc.pid
        self.current_pid = run.pid
        return run

    def close(self) -> None:
        try:
            self._close_zygote()
        finally:
            if self._owned and not self.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def _close_zygote(self) -> None:
        z, self._zygote = self._zygote, None
        if z is None:
            return
        try:
            if z.poll() is None:
                self._send_quiet(z)
                z.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            _killpg(z.pid)
            z.wait()
        except BaseException:  # Ctrl-C while it says goodbye
            _killpg(z.pid)
            z.wait()
            raise
        finally:
            if self._sel is not None:
                self._sel.close()
                self._sel = None
            for stream in (z.stdin, z.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass

    @staticmethod
    def _send_quiet(z: subprocess.Popen[str]) -> None:
        try:
            assert z.stdin is not None
            z.stdin.write(json.dumps({"op": "exit"}) + "\n")
            z.stdin.close()
        except (OSError, ValueError):
            pass

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Running:
    """A job started by :meth:`Pool.start`: its worker process (forked by the pool's zygote, or spawned)."""

    pool: Pool
    job: dict[str, Any]
    out: Path
    log: Path
    timeout_s: float
    t0: float
    pid: int = 0
    proc: subprocess.Popen[bytes] | None = None
    status: int | None = None

    def ended(self) -> bool:
        """Whether the worker process has exited (never blocks)."""
        if self.status is None:
            if self.proc is not None:
                self.status = self.proc.poll()
            else:
                msg = self.pool._recv(timeout_s=0.001)
                if msg is not None:
                    self.status = int(msg.get("status", -9))
        return self.status is not None

    def kill(self) -> None:
        _killpg(self.pid)  # the worker leads a process group of its own

    def finish(self) -> ProcessResult:
        """Wait for the process (killed at its timeout) and read its result."""
        try:
            if self.status is None:
                left = max(self.timeout_s - (time.perf_counter() - self.t0), 0.001)
                if self.proc is not None:
                    try:
                        self.status = self.proc.wait(timeout=left)
                    except subprocess.TimeoutExpired:
                        self.kill()
                        self.status = self.proc.wait()
                else:
                    msg = self.pool._recv(timeout_s=left)
                    if msg is None:
                        self.kill()
                        msg = self.pool._recv(timeout_s=60)
                    self.status = int((msg or {}).get("status", -9))
        except BaseException:
            self.kill()
            if self.proc is not None:
                self.proc.wait()
            raise
        finally:
            self.pool.current_pid = None
        return self._result(time.perf_counter() - self.t0)

    def _result(self, wall: float) -> ProcessResult:
        pid, status, job, out, log = self.pid, int(self.status if self.status is not None else -9), self.job, \
            self.out, self.log
        idx, label = int(job.get("index", 0)), str(job.get("label", ""))
        if out.is_file():
            try:
                res = ProcessResult.from_wire(json.loads(out.read_text()), pid=pid, wall_s=wall)
            except (ValueError, TypeError, KeyError) as exc:
                return ProcessResult.failed(idx, pid, label, f"unreadable worker result {out}: {exc}",
                                            _tail(log), wall)
            if status != 0 and res.error is None:
                return ProcessResult.failed(idx, pid, label, f"worker process {pid} {_signal_text(status)} after "
                                            "writing its result", _tail(log), wall)
            return res
        what = f"timed out after {self.timeout_s:.0f} s and was killed" if status == -9 and wall >= self.timeout_s \
            else _signal_text(status)
        return ProcessResult.failed(idx, pid, label, f"worker process {pid} died: {what} (log {log})", _tail(log),
                                    wall)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        _kill(pid)


def preload_modules(backends: set[str]) -> tuple[str, ...]:
    """What a zygote imports once for these backends (forked children share it)."""
    mods: list[str] = []
    if any(b.startswith("torch") or b.startswith("onnxruntime") for b in backends):
        mods += ["torch", "transformers", "safetensors", "perfsuite.backends.torch_backend", "perfsuite.measure",
                 "transformers.models.llama.modeling_llama", "transformers.models.opt.modeling_opt"]
    if any(b.startswith("onnxruntime") for b in backends):
        mods += ["onnxruntime", "perfsuite.backends.onnxruntime"]
    return tuple(mods)


def forkable(backend: str) -> bool:
    """vLLM starts engine processes and threads of its own; it gets a fresh interpreter per worker."""
    return not backend.startswith("vllm")


def plan(side: Side, args: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
    """The cells ``side``'s own tree and config select for ``args`` (see ``python -m perfsuite.worker plan``)."""
    proc = run_tool([side.python, "-m", "perfsuite.worker", "plan", json.dumps(args)], timeout_s, cwd=side.tree,
                    env=side.environ())
    name = f"side {side.label}" if side.label else "worker"
    try:
        out = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        tail = proc.problem or (proc.stderr.strip().splitlines() or ["no output"])[-1]
        _raise_if_syntax(name, side, tail)
        raise SideError(f"{name}: {side.python} cannot list the cells of {side.tree} ({tail})") from None
    if "error" in out:
        raise SideError(f"{name} ({side.tree}): {out['error']}")
    return out
