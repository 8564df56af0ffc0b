"""The coordinator's side of process-replicated measurement: start workers from a source tree with an
interpreter, hand them jobs one at a time, collect what they measured. Nothing is timed here."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.facts import TREE
from perfsuite.facts.errors import reraise_as
from perfsuite.machine.external import CANNOT_RUN, NOT_FOUND, TIMED_OUT, ToolResult, kill_group, run_tool
from perfsuite.measure.worker import layout
from perfsuite.measure.worker.job import PROTOCOL, ProcessResult
from perfsuite.measure.worker.zygote import Zygote, ZygoteError, signal_text, tail

# The module paths another tree is driven through, where that tree predates the layer packages (commits before
# 2026-12-05 hold perfsuite/worker/, perfsuite/measure.py, perfsuite/serve/, ...): `perfsuite ab`, the confirmation
# and bisect still measure such a tree, under its own names.
FLAT_NAMES = {
    "perfsuite.measure.worker": "perfsuite.worker",
    "perfsuite.measure.worker.child": "perfsuite.worker.child",
    "perfsuite.measure.loop": "perfsuite.measure",
    "perfsuite.measure.backends.torch_backend": "perfsuite.backends.torch_backend",
    "perfsuite.measure.backends.onnxruntime": "perfsuite.backends.onnxruntime",
    "perfsuite.measure.serving.replicate": "perfsuite.serve.replicate",
}


def flat_tree(tree: Path) -> bool:
    """Whether ``tree`` holds perfsuite in its flat layout (from before the layer packages)."""
    return not (tree / "perfsuite" / "measure" / "worker" / "__main__.py").is_file()


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
    fixed_layout: bool = False  # workers start without ASLR (perfsuite.measure.worker.layout): same addresses per tree

    def module(self, name: str) -> str:
        """``name`` (this tree's module path) as this side's tree spells it."""
        return FLAT_NAMES.get(name, name) if flat_tree(self.tree) else name

    def has(self, name: str) -> bool:
        """Whether this side's tree holds the module ``name`` (as this tree spells it)."""
        return (self.tree / (self.module(name).replace(".", "/") + ".py")).is_file()

    def who(self, default: str = "worker") -> str:
        return f"side {self.label}" if self.label else default

    def argv(self, module: str, *args: str) -> list[str]:
        """``python -m module args`` with this side's interpreter, ``module`` as this side's tree spells it."""
        return [self.python, "-m", self.module(module), *args]

    def run(self, module: str, *args: str, timeout_s: float) -> ToolResult:
        """:meth:`argv` run to its end in this side's tree and environment."""
        return run_tool(self.argv(module, *args), timeout_s, cwd=self.tree, env=self.environ())

    def environ(self) -> dict[str, str]:
        old = os.environ.get("PYTHONPATH")
        return {**os.environ, "PYTHONPATH": str(self.tree) + (os.pathsep + old if old else ""), **dict(self.env)}


def this_side(label: str = "") -> Side:
    """The tree this coordinator's own perfsuite was imported from, with this interpreter."""
    return Side(TREE, sys.executable, label)


def probe(side: Side, modules: tuple[str, ...] = (), timeout_s: float = 300) -> dict[str, Any]:
    """Ask the side's interpreter where it imports perfsuite from (and whether it can import ``modules``); refuse a
    side that imports another tree or lacks what its workers need."""
    name = side.who()
    if not Path(side.python).exists() and "/" in side.python:
        raise SideError(f"{name}: interpreter {side.python} does not exist; pass an existing python (e.g. "
                        f"{side.tree}/.venv/bin/python)")
    proc = side.run("perfsuite.measure.worker", "probe", *map(side.module, modules), timeout_s=timeout_s)
    if proc.rc in (NOT_FOUND, CANNOT_RUN, TIMED_OUT) and proc.problem:
        raise SideError(f"{name}: cannot run {side.python}: {proc.problem}")
    if proc.rc != 0:
        why = _raise_if_syntax(name, side, proc)
        raise SideError(f"{name}: {side.python} cannot run perfsuite's worker from {side.tree} ({why}); install "
                        f"perfsuite's dependencies into that interpreter (scripts/install.sh) or pass another python")
    facts = last_json(proc)
    if facts is None:
        raise SideError(f"{name}: unreadable probe output from {side.python}: {proc.stdout[-200:]!r}")
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


def last_json(proc: ToolResult) -> dict[str, Any] | None:
    """The JSON object on the last line a side's module printed; None if there is none."""
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return None


def last_line(proc: ToolResult) -> str:
    """Why a side's module gave no answer: the problem, or the last line of its stderr."""
    return proc.problem or (proc.stderr.strip().splitlines() or ["no output"])[-1]


def _raise_if_syntax(name: str, side: Side, failed: ToolResult | str) -> str:
    """A tree that does not compile is that tree's bug, not a missing dependency: name the file and line (found by
    compiling the tree's package here, whatever the side's interpreter printed) and that fix. Else the text (a
    failed call's :func:`last_line`) back."""
    text = failed if isinstance(failed, str) else last_line(failed)
    if not any(t in text for t in ("SyntaxError", "IndentationError", "TabError")):
        return text
    for f in sorted((side.tree / "perfsuite").rglob("*.py")):
        try:
            compile(f.read_bytes(), str(f), "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise SideError(f"{name}: {f}, line {exc.lineno}: {type(exc).__name__}: {exc.msg}; fix the syntax error "
                            "in that tree") from None
        except (OSError, ValueError):
            continue
    raise SideError(f"{name}: {text}; fix the syntax error in {side.tree}")


class Pool:
    """Worker processes of one side. ``fork`` jobs run in children of one pre-imported zygote (cheap: ~0.1 s
    plus the model load), which may serve another side too (:func:`pair_pools`); ``spawn`` jobs run in a fresh
    interpreter each (vLLM, which must not be forked)."""

    def __init__(self, side: Side, workdir: Path | None = None, preload: tuple[str, ...] = ()) -> None:
        self.side = side
        # A folder of our own making goes on close() unless a failure (named with it) keeps it.
        self._owned = workdir is None
        self.keep = False
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="perfsuite-workers-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.zygote = Zygote(side, self.workdir, preload)  # started on first use; pair_pools may swap in a shared one
        self._count = 0

    # ------------------------------------------------------------------------------------------------- jobs
    def measure(self, job: dict[str, Any], *, fork: bool = True, timeout_s: float = 1800,
                keep_failed: bool = True) -> ProcessResult:
        """One job in a fresh worker. A failure keeps this pool's folder and names it, unless ``keep_failed`` is
        off (a job whose failure the caller reports in full and only notes, such as the run-start peaks)."""
        res = self.start(job, fork=fork, timeout_s=timeout_s).finish()
        if res.error and self._owned and keep_failed:
            self.keep = True
            res = dataclasses.replace(res, error=f"{res.error} (worker files kept in {self.workdir})")
        return res

    def start(self, job: dict[str, Any], *, fork: bool = True, timeout_s: float = 1800) -> Running:
        """Start one job in a fresh worker and return at once (a lockstep pair runs two at a time, one per pool);
        :meth:`Running.finish` collects it. A pool runs one job at a time."""
        self._count += 1
        stem = f"{self.side.label or 'w'}{self._count:04d}"
        job_path, out, log = (self.workdir / f"{stem}{end}" for end in (".job.json", ".out.json", ".log"))
        job_path.write_text(json.dumps(job))
        run = Running(self, job, out, log, timeout_s, time.perf_counter())
        if fork:
            with reraise_as(SideError, ZygoteError):
                run.pid = self.zygote.fork(job_path, out, log, self.side.tree)
        else:
            with open(log, "a") as fh:
                run.proc = subprocess.Popen(self.side.argv("perfsuite.measure.worker", "run", str(job_path), str(out)),
                                            cwd=self.side.tree, env=self.side.environ(), stdout=fh, stderr=fh,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=layout.preexec(self.side.fixed_layout))
            run.pid = run.proc.pid
        return run

    def close(self) -> None:
        try:
            self.zygote.close()  # a shared one: the first pool closed ends it (closing twice is harmless)
        finally:
            if self._owned and not self.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)

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
            self.status = self.proc.poll() if self.proc is not None else self._wait(0.001)
        return self.status is not None

    def kill(self) -> None:
        kill_group(self.pid, or_alone=True)  # the worker leads a process group of its own

    def _wait(self, timeout_s: float) -> int | None:
        """The exit status, or None if the process did not end within ``timeout_s``."""
        if self.proc is None:
            with reraise_as(SideError, ZygoteError):
                return self.pool.zygote.exit_status(self.pid, timeout_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(timeout=timeout_s)
        return None

    def finish(self) -> ProcessResult:
        """Wait for the process (killed at its timeout) and read its result."""
        try:
            if self.status is None:
                self.status = self._wait(max(self.timeout_s - (time.perf_counter() - self.t0), 0.001))
            if self.status is None:
                self.kill()
                self.status = self.proc.wait() if self.proc is not None else self._wait(60)
            if self.status is None:
                self.status = -9
        except BaseException:
            self.kill()
            if self.proc is not None:
                self.proc.wait()
            raise
        return self._result(time.perf_counter() - self.t0)

    def _result(self, wall: float) -> ProcessResult:
        pid, status, out, log = self.pid, int(self.status if self.status is not None else -9), self.out, self.log
        idx, label = int(self.job.get("index", 0)), str(self.job.get("label", ""))

        def failed(error: str) -> ProcessResult:
            return ProcessResult.failed(idx, pid, label, error, tail(log), wall)

        if out.is_file():
            try:
                res = ProcessResult.from_wire(json.loads(out.read_text()), pid=pid, wall_s=wall)
            except (ValueError, TypeError, KeyError) as exc:
                return failed(f"unreadable worker result {out}: {exc}")
            if status != 0 and res.error is None:
                return failed(f"worker process {pid} {signal_text(status)} after writing its result")
            return res
        what = f"timed out after {self.timeout_s:.0f} s and was killed" if status == -9 and wall >= self.timeout_s \
            else signal_text(status)
        return failed(f"worker process {pid} died: {what} (log {log})")


def pair_pools(sides: dict[str, Side], workdirs: dict[str, Path | None], preload: tuple[str, ...],
               mode: str = "shared") -> tuple[dict[str, Pool], str]:
    """One pool per side of an A/B, and the line that says where their workers come from. ``mode`` ``shared``:
    every forked worker of both sides is a child of one zygote (perfsuite.measure.worker.zygote says why), when the
    sides run one interpreter with one environment; it runs from this coordinator's tree and preloads third-party
    modules only, and each child imports its own side's tree. Otherwise (or ``per-side``) one zygote per side."""
    pools = {s: Pool(side, workdirs.get(s), preload) for s, side in sides.items()}
    why = "--zygote per-side" if mode == "per-side" else _cannot_share(list(sides.values()))
    if why:
        return pools, (f"zygotes: one per side ({why}): every worker of a side shares its zygote's draws (hash seed, "
                       "layout), which can offset the sides by a fixed amount for the whole run")
    first = next(iter(sides.values()))
    zside = Side(this_side().tree, first.python, "AB", first.env, first.fixed_layout)
    shared = Zygote(zside, next(iter(pools.values())).workdir,
                    tuple(m for m in preload if m.split(".")[0] != "perfsuite"), shared=True)
    for pl in pools.values():
        pl.zygote = shared
    return pools, ("zygotes: one for both sides: every worker is a fresh child of one pre-imported interpreter that "
                   "imports its side's tree, so A and B workers differ by their code, not by their zygotes' draws")


def _cannot_share(sides: list[Side]) -> str:
    for values, why in (({os.path.realpath(shutil.which(s.python) or s.python) for s in sides},
                         "the sides run different interpreters"),
                        ({tuple(sorted(s.env)) for s in sides}, "the sides' environments differ (--a-env/--b-env)"),
                        ({s.fixed_layout for s in sides}, "the sides' layouts differ")):
        if len(values) > 1:
            return why
    return ""


def preload_modules(backends: set[str]) -> tuple[str, ...]:
    """What a zygote imports once for these backends (forked children share it)."""
    mods: list[str] = []
    if any(b.startswith(("torch", "onnxruntime")) for b in backends):
        mods += ["torch", "transformers", "safetensors", "perfsuite.measure.backends.torch_backend",
                 "perfsuite.measure.loop", "transformers.models.llama.modeling_llama",
                 "transformers.models.opt.modeling_opt"]
    if any(b.startswith("onnxruntime") for b in backends):
        mods += ["onnxruntime", "perfsuite.measure.backends.onnxruntime"]
    return tuple(mods)


def plan(side: Side, args: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
    """The cells ``side``'s own tree and config select for ``args`` (``python -m perfsuite.measure.worker plan``)."""
    proc = side.run("perfsuite.measure.worker", "plan", json.dumps(args), timeout_s=timeout_s)
    out = last_json(proc)
    if out is None:
        why = _raise_if_syntax(side.who(), side, proc)
        raise SideError(f"{side.who()}: {side.python} cannot list the cells of {side.tree} ({why})")
    if "error" in out:
        raise SideError(f"{side.who()} ({side.tree}): {out['error']}")
    return out
