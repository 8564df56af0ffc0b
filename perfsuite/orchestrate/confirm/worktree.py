"""A's tree: the baselines' commit checked out into a temporary ``git worktree``, removed afterwards on success,
failure, Ctrl-C and SIGTERM (a CI job being cancelled): while the tree exists SIGTERM is turned into the Ctrl-C path,
and a SIGINT during the removal is held back until it is done."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from perfsuite.machine.signals import sigterm_as_interrupt


class CannotConfirm(Exception):
    """Why no A/B can confirm a stored-baseline regression, with the fix; one line."""


def _git(cwd: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=timeout_s)


def toplevel(path: Path) -> Path:
    try:
        proc = _git(path, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.SubprocessError) as exc:
        raise CannotConfirm(f"git is not available ({exc}); install git so the baselines' commit can be checked "
                            "out") from None
    if proc.returncode != 0:
        raise CannotConfirm(f"{path} is not a git checkout, so the baselines' commit cannot be checked out for an "
                            "A/B; run from a clone of the repository (not an unpacked archive)")
    return Path(proc.stdout.strip()).resolve()


def check_commit(top: Path, sha: str) -> None:
    proc = _git(top, "cat-file", "-e", f"{sha}^{{commit}}")
    if proc.returncode == 0:
        return
    shallow = _git(top, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    why = "this clone is shallow" if shallow else "it is not in this clone"
    raise CannotConfirm(f"the baselines' commit {sha[:12]} is absent ({why}); fetch the history: `git fetch "
                        "--unshallow` (GitHub Actions: actions/checkout with `fetch-depth: 0`), or `git fetch origin "
                        f"{sha}`")


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Defer Ctrl-C while cleaning up (only the main thread can set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if got:
            raise KeyboardInterrupt


def remove(top: Path, tree: Path) -> None:
    with _sigint_held():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _git(top, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(tree.parent, ignore_errors=True)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _git(top, "worktree", "prune")


_PREFIX = "perfsuite-confirm-"
_OWNER = "owner.json"  # beside the worktree: the pid and start time of the process that made it


def _alive(owner: dict) -> bool:
    import psutil

    try:
        return abs(psutil.Process(int(owner["pid"])).create_time() - float(owner["started"])) < 1.0
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def sweep_stale(top: Path) -> list[Path]:
    """Remove the confirmation worktrees of ``top`` whose owner process is gone (a run killed with SIGKILL cannot
    clean up after itself): they stay registered in ``git worktree list`` and their checkouts fill the temp dir.
    Returns what was removed."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listed = _git(top, "worktree", "list", "--porcelain").stdout
        gone: list[Path] = []
        for line in listed.splitlines():
            if not line.startswith("worktree "):
                continue
            tree = Path(line.split(" ", 1)[1])
            if not tree.parent.name.startswith(_PREFIX) or tree.resolve() == top:
                continue
            try:
                owner = json.loads((tree.parent / _OWNER).read_text())
            except (OSError, ValueError):
                owner = {}
            if not _alive(owner):
                remove(top, tree)
                gone.append(tree)
        return gone
    return []


@contextlib.contextmanager
def temporary_worktree(top: Path, sha: str) -> Iterator[Path]:
    """``top``'s commit ``sha`` in a fresh detached worktree under the temp dir; gone when the block ends. Worktrees
    that killed runs left behind are removed first (:func:`sweep_stale`), and said so on stderr."""
    for old in sweep_stale(top):
        print(f"perfsuite: removed the confirmation worktree {old} that a killed run left behind", file=sys.stderr)
    with sigterm_as_interrupt():
        tree = Path(tempfile.mkdtemp(prefix=_PREFIX)) / "a"
        try:
            import psutil

            (tree.parent / _OWNER).write_text(json.dumps({"pid": os.getpid(),
                                                          "started": psutil.Process().create_time()}))
            proc = _git(top, "worktree", "add", "--detach", "--quiet", str(tree), sha, timeout_s=600)
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise CannotConfirm(f"git worktree add of {sha[:12]} failed ({tail}); check `git worktree list` and "
                                    "the free space of the temp dir")
            yield tree
        finally:
            remove(top, tree)
