"""Pre-flight checks for recording baselines (``--perf-update-baselines``), run before anything is measured: a
baseline recorded on a contended machine is wrong for as long as it is kept (two recording runs at once both stored
TTFT 100x the normal one). Every run also holds the :class:`SuiteLock` while it measures: two runs measuring at once
slowed each other ~4x and their drift notes read as nonsense. A recording run refuses at once when another holds it;
an ordinary run waits for it (:func:`lock_wait_s`). The kernel drops a lock when its holder dies: a crashed run never
blocks the next one.

Linux only (``fcntl``; psutil's per-process times elsewhere differ); elsewhere :func:`sample_load` reports itself
unavailable and the lock is a no-op.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from perfsuite.facts.config import LoadPolicy  # the load check's policy: [tool.perfsuite.preflight]


class PreflightError(Exception):
    """A pre-flight check refused the run; the message says what was found and the fix."""


# ----------------------------------------------------------------------------------------------- writable folder
def nearest_existing(path: Path) -> Path:
    """``path`` if it exists, else the nearest existing folder above it (where it would be created)."""
    probe = Path(path)
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


def try_write(folder: Path) -> OSError | None:
    """Create and remove a temporary file in ``folder``: None if that worked, else the error."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".perfsuite-writable-", dir=folder)
    except OSError as exc:
        return exc
    os.close(fd)
    os.unlink(tmp)
    return None


def check_writable(directory: Path) -> Path:
    """Raise :class:`PreflightError` unless a new file can be created in ``directory`` (or, if it does not exist
    yet, in the nearest existing folder above it, where it would be created). Returns the folder tried."""
    directory = Path(directory)
    probe = nearest_existing(directory)
    if probe.exists() and not probe.is_dir():
        raise PreflightError(f"{probe} is a file, not a folder: cannot store baselines in {directory}; move it away")
    exc = try_write(probe)
    if exc is not None:
        hint = ("make it writable (chmod u+w, or a checkout you own)" if exc.errno in (errno.EACCES, errno.EPERM)
                else "mounted read-only: record on a writable checkout" if exc.errno == errno.EROFS
                else "free space or fix the file system" if exc.errno == errno.ENOSPC else "fix the folder")
        raise PreflightError(f"cannot record baselines: {probe} is not writable ({exc.strerror}); {hint}, "
                             "then run again (nothing was measured)")
    return probe


# ----------------------------------------------------------------------------------------------------- suite lock
def default_lock_dir() -> Path:
    """Per user and machine: $PERFSUITE_LOCK_DIR, else $XDG_RUNTIME_DIR/perfsuite, else <tmp>/perfsuite-<uid>. (The
    project's own parallel tests give each xdist worker its own: their runs measure side by side on purpose.)"""
    if os.environ.get("PERFSUITE_LOCK_DIR"):
        return Path(os.environ["PERFSUITE_LOCK_DIR"])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "perfsuite"
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"perfsuite-{uid}"


@dataclass(frozen=True)
class Holder:
    pid: int
    mode: str  # "exclusive" (recording) | "shared"
    command: str
    since: float

    def describe(self) -> str:
        what = {"exclusive": "a recording run (--perf-update-baselines)", "measuring": "a perfsuite run measuring"
                }.get(self.mode, "a perfsuite run")
        age = max(0, int(time.time() - self.since))
        return f"{what}, pid {self.pid}, running {age} s: {self.command}"


LOCK_WAIT_S = 1800.0  # how long an ordinary run waits for another to finish measuring; env PERFSUITE_LOCK_WAIT_S


def lock_wait_s(env: dict[str, str] | None = None) -> float:
    """Seconds an ordinary run waits for the suite lock: ``PERFSUITE_LOCK_WAIT_S`` (0: refuse at once), else
    LOCK_WAIT_S."""
    raw = (os.environ if env is None else env).get("PERFSUITE_LOCK_WAIT_S", "").strip()
    if not raw:
        return LOCK_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise PreflightError(f"PERFSUITE_LOCK_WAIT_S={raw!r} is not a number of seconds >= 0; unset it, or set e.g. "
                             "600 (0: refuse at once when another perfsuite run is measuring)")
    return value


class LockBusy(PreflightError):
    def __init__(self, message: str, holders: list[Holder]) -> None:
        super().__init__(message)
        self.holders = holders


class SuiteLock:
    """``with SuiteLock(exclusive=True): ...`` or ``acquire()`` / ``release()``; raises :class:`LockBusy` at once,
    naming the holders (non-blocking). The lock file is opened close-on-exec, so a spawned interpreter does not
    inherit it; a *forked* worker does share it (flock belongs to the open file description), which keeps the lock
    for as long as any of the run's processes lives."""

    def __init__(self, exclusive: bool, directory: Path | None = None, command: str | None = None,
                 measuring: bool = False) -> None:
        self.exclusive = exclusive or measuring  # measuring: an ordinary run, alone while it measures
        self.mode = "measuring" if measuring else "exclusive" if exclusive else "shared"
        self.directory = Path(directory) if directory else default_lock_dir()
        self.command = command if command is not None else " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300]
        self.path = self.directory / "suite.lock"
        self._fd: int | None = None

    def _holder_file(self, pid: int) -> Path:
        return self.directory / f"holder-{pid}.json"

    def holders(self) -> list[Holder]:
        """Runs that hold (or held, if still alive) the lock; files of dead processes are removed."""
        out = []
        for f in sorted(self.directory.glob("holder-*.json")):
            try:
                d = json.loads(f.read_text())
                h = Holder(int(d["pid"]), str(d["mode"]), str(d["command"]), float(d["since"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if h.pid == os.getpid():
                continue
            if psutil.pid_exists(h.pid):
                out.append(h)
            else:
                with contextlib.suppress(OSError):
                    f.unlink()
        return out

    def acquire(self, wait_s: float = 0.0, say: Any = None) -> SuiteLock:
        """Take the lock; held by another run: refuse (:class:`LockBusy`) at once, or with ``wait_s`` > 0 first wait
        that long for it, telling ``say`` once whom it waits for."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return self
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise PreflightError(f"cannot create the suite lock {self.path} ({exc.strerror}); set XDG_RUNTIME_DIR "
                                 "or TMPDIR to a writable folder") from None
        mode = (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        deadline = time.monotonic() + wait_s
        told = False
        try:
            while True:
                try:
                    fcntl.flock(fd, mode)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._busy(waited=wait_s) from None
                    if not told and say is not None:
                        names = "; ".join(h.describe() for h in self.holders()) or "a run that left no pid file"
                        up_to = f"{wait_s:.0f} s" if wait_s < 120 else f"{wait_s / 60:.0f} min"
                        say(f"perfsuite: waiting up to {up_to} for another perfsuite run on this "
                            f"machine to finish measuring ({names}): two at once slow each other")
                        told = True
                    time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        except BaseException:  # refused, or Ctrl-C while waiting: nothing held
            os.close(fd)
            raise
        self._fd = fd
        holder = Holder(os.getpid(), self.mode, self.command, time.time())
        tmp = self._holder_file(os.getpid()).with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(holder)))
        os.replace(tmp, self._holder_file(os.getpid()))
        return self

    def _busy(self, waited: float = 0.0) -> LockBusy:
        holders = self.holders()
        names = "; ".join(h.describe() for h in holders) or "another perfsuite run (it left no pid file)"
        if waited > 0:
            return LockBusy(f"another perfsuite run is still measuring on this machine after {waited:.0f} s of "
                            f"waiting ({names}); run again when it is done, or raise PERFSUITE_LOCK_WAIT_S (lock "
                            f"{self.path})", holders)
        if self.mode == "measuring":
            msg = (f"another perfsuite run is measuring on this machine ({names}); two at once slow each other. "
                   "Wait for it to finish (PERFSUITE_LOCK_WAIT_S=0 refused at once)")
        elif self.exclusive:
            msg = (f"another perfsuite run is using this machine ({names}); a baseline recorded beside it would "
                   "be slowed by it. Wait for it to finish, then record again")
        else:
            msg = (f"a baseline is being recorded on this machine ({names}); this run would disturb it and be "
                   "disturbed by it. Wait for it to finish")
        return LockBusy(f"{msg} (lock {self.path})", holders)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self._holder_file(os.getpid()).unlink()
        os.close(self._fd)  # closing the last descriptor of the open file drops the flock
        self._fd = None

    def __enter__(self) -> SuiteLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ------------------------------------------------------------------------------------------------------ load check
@dataclass(frozen=True)
class OtherProcess:
    pid: int
    name: str
    cores: float  # CPU time in the interval / interval


@dataclass(frozen=True)
class LoadSample:
    """CPU use over ``interval_s``, in cores (1.0 = one core busy for the whole interval)."""

    available: bool
    interval_s: float = 0.0
    cpus: int = 0
    busy_cores: float = 0.0  # all CPU time but idle and iowait (/proc/stat), steal included
    own_cores: float = 0.0  # this process tree (the root pid and its descendants)
    other_cores: float = 0.0  # busy_cores - own_cores: what other processes and the kernel used
    steal_cores: float = 0.0  # taken by the hypervisor from this VM
    loadavg_1m: float = 0.0
    running: int = 0  # runnable tasks now (/proc/loadavg field 4), this process included
    top: tuple[OtherProcess, ...] = ()
    reason: str = ""  # why not available

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "top"}, "top": [vars(o) for o in self.top]}

    def describe(self) -> str:
        if not self.available:
            return f"load check unavailable: {self.reason}"
        top = ", ".join(f"pid {o.pid} {o.name} {o.cores:.2f}" for o in self.top) or "no single process stands out"
        return (f"{self.other_cores:.2f} of {self.cpus} cores busy outside this run over {self.interval_s:.2f} s "
                f"(steal {self.steal_cores:.2f}; load average {self.loadavg_1m:.2f}; busiest others: {top})")


@dataclass(frozen=True)
class LoadVerdict:
    ok: bool
    sample: LoadSample
    problems: tuple[str, ...] = ()

    def message(self) -> str:
        if self.ok:
            return f"machine quiet: {self.sample.describe()}"
        return ("machine busy: " + "; ".join(self.problems) + f". {self.sample.describe()}. Stop the other work "
                "(or record on a dedicated runner), then record again")


def _busy_steal() -> tuple[float, float]:
    """(busy, steal) CPU seconds summed over all CPUs; busy is everything but idle and iowait (guest time is already
    inside user and nice)."""
    t = psutil.cpu_times()
    steal = getattr(t, "steal", 0.0)
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + steal, steal


def _procs() -> dict[int, tuple[str, float]]:
    """pid -> (name, user + system CPU seconds) for every readable process."""
    return {p.pid: (p.info["name"] or "?", t.user + t.system) for p in psutil.process_iter(["name", "cpu_times"])
            if (t := p.info["cpu_times"]) is not None}


def _tree(root: int) -> set[int]:
    try:
        return {root, *(c.pid for c in psutil.Process(root).children(recursive=True))}
    except psutil.Error:
        return {root}


def sample_load(interval_s: float = 0.5, root: int | None = None, top_n: int = 3) -> LoadSample:
    """Sample CPU use for ``interval_s``; ``root`` (default: this process) and its descendants are "own"."""
    if not sys.platform.startswith("linux"):
        return LoadSample(False, reason=f"not Linux ({sys.platform}): no per-process accounting to trust")
    root = os.getpid() if root is None else root
    own, p0 = _tree(root), _procs()
    busy0, steal0 = _busy_steal()
    t0 = time.monotonic()
    time.sleep(interval_s)
    busy1, steal1 = _busy_steal()
    t1 = time.monotonic()
    p1 = _procs()
    own |= _tree(root)
    dt = max(t1 - t0, 1e-6)
    deltas = {pid: p1[pid][1] - p0[pid][1] for pid in p1 if pid in p0}
    # Processes that ended in the interval are invisible here; the machine-wide counters still count their time as
    # "other".
    cpus = psutil.cpu_count() or 1
    busy_cores = (busy1 - busy0) / dt
    own_cores = sum(d for pid, d in deltas.items() if pid in own) / dt
    others = sorted(((pid, d) for pid, d in deltas.items() if pid not in own and d > 0), key=lambda x: -x[1])
    top = tuple(OtherProcess(pid, p1[pid][0], round(d / dt, 3)) for pid, d in others[:top_n])
    try:
        la = Path("/proc/loadavg").read_text().split()
        load1, running = float(la[0]), int(la[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        load1, running = 0.0, 0
    return LoadSample(True, round(dt, 3), cpus, round(busy_cores, 3), round(own_cores, 3),
                      round(max(0.0, busy_cores - own_cores), 3), round((steal1 - steal0) / dt, 3),
                      load1, running, top)


def check_load(policy: LoadPolicy | None = None, root: int | None = None) -> LoadVerdict:
    """Sample and judge: ``ok`` False when other processes or the hypervisor took more than the policy allows."""
    policy = policy or LoadPolicy()
    s = sample_load(policy.interval_s, root)
    if not s.available:
        return LoadVerdict(True, s)
    problems = []
    if s.other_cores > policy.max_other_cores:
        problems.append(f"{s.other_cores:.2f} cores used outside this run (allowed {policy.max_other_cores:.2f})")
    if s.steal_cores > policy.max_steal_cores:
        problems.append(f"{s.steal_cores:.2f} cores stolen by the hypervisor (allowed {policy.max_steal_cores:.2f})")
    return LoadVerdict(not problems, s, tuple(problems))
