"""A's tree: a temporary git worktree of the baselines' commit, gone after success, failure, SIGINT and SIGTERM; and the
reasons a confirmation cannot run, each one line with its fix (real git repositories in tmp_path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfsuite.orchestrate.confirm.session import baseline_commit
from perfsuite.orchestrate.confirm.worktree import CannotConfirm, check_commit, temporary_worktree, toplevel

ROOT = Path(__file__).resolve().parents[2]


def default_sigint() -> None:
    """A shell that starts this run in the background ignores SIGINT, and children inherit that: restore it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "code.py").write_text("SLOW = False\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "one")
    first = git(r, "rev-parse", "HEAD")
    (r / "code.py").write_text("SLOW = True\n")
    git(r, "commit", "-q", "-am", "two")
    return r, first, git(r, "rev-parse", "HEAD")


def worktrees(r: Path) -> int:
    return git(r, "worktree", "list").count("\n") + 1


def test_worktree_holds_the_commit_and_is_gone_after_success(repo: tuple[Path, str, str]) -> None:
    r, first, _ = repo
    (r / "code.py").write_text("SLOW = 'uncommitted'\n")  # B's uncommitted change stays B's
    with temporary_worktree(toplevel(r), first) as tree:
        assert (tree / "code.py").read_text() == "SLOW = False\n" and worktrees(r) == 2
    assert not tree.exists() and not tree.parent.exists() and worktrees(r) == 1
    assert (r / "code.py").read_text() == "SLOW = 'uncommitted'\n"


def test_worktree_is_gone_after_a_failure(repo: tuple[Path, str, str]) -> None:
    r, first, _ = repo
    with pytest.raises(RuntimeError), temporary_worktree(r, first) as tree:
        raise RuntimeError("A's worker died")
    assert not tree.parent.exists() and worktrees(r) == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_worktree_is_gone_after_sigint(repo: tuple[Path, str, str], tmp_path: Path, sig: int) -> None:
    r, first, _ = repo
    script = ("import sys, time\nfrom pathlib import Path\nfrom perfsuite.orchestrate.confirm.worktree import temporary_worktree\n"
              f"with temporary_worktree(Path({str(r)!r}), {first!r}) as t:\n"
              "    print(t, flush=True)\n    time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), preexec_fn=default_sigint)
    assert proc.stdout is not None
    tree = Path(proc.stdout.readline().strip())
    assert tree.is_dir() and worktrees(r) == 2
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    # SIGTERM arrives as perfsuite.machine.signals.Terminated, a KeyboardInterrupt: the Ctrl-C path
    assert proc.returncode != 0 and ("KeyboardInterrupt" in err or "signals.Terminated: signal 15" in err), err
    assert not tree.parent.exists() and worktrees(r) == 1


def test_a_worktree_left_by_sigkill_is_removed_by_the_next_run(repo: tuple[Path, str, str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL leaves no chance to clean up: the worktree stays registered and its checkout stays in the temp dir.
    The next confirmation finds its owner gone, removes it and says so; a live owner's worktree is left alone."""
    r, first, _ = repo
    script = ("import sys, time\nfrom pathlib import Path\nfrom perfsuite.orchestrate.confirm.worktree import temporary_worktree\n"
              f"with temporary_worktree(Path({str(r)!r}), {first!r}) as t:\n"
              "    print(t, flush=True)\n    time.sleep(120)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT))) for _ in range(2)]
    killed, alive = (Path(p.stdout.readline().strip()) for p in procs if p.stdout is not None)
    try:
        procs[0].kill()
        procs[0].communicate(timeout=30)
        assert killed.is_dir() and worktrees(r) == 3
        with temporary_worktree(toplevel(r), first) as tree:
            assert worktrees(r) == 3 and alive.is_dir()  # the killed run's is gone, the live one's is kept
        assert not killed.parent.exists() and str(killed) not in git(r, "worktree", "list")
        assert f"removed the confirmation worktree {killed} that a killed run left behind" in capsys.readouterr().err
        assert not tree.exists()
    finally:
        procs[1].terminate()
        procs[1].communicate(timeout=60)
    assert worktrees(r) == 1 and not alive.parent.exists()


def test_not_a_git_checkout(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(CannotConfirm, match=r"plain is not a git checkout, so the baselines' commit cannot be "
                                            r"checked out for an A/B; run from a clone"):
        toplevel(tmp_path / "plain")


def test_commit_absent_in_a_shallow_clone(repo: tuple[Path, str, str], tmp_path: Path) -> None:
    r, first, head = repo
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{r}", str(shallow)], check=True)
    check_commit(shallow, head)
    with pytest.raises(CannotConfirm) as exc:
        check_commit(shallow, first)
    msg = str(exc.value)
    assert f"the baselines' commit {first[:12]} is absent (this clone is shallow)" in msg
    assert "git fetch --unshallow" in msg and "fetch-depth: 0" in msg and "\n" not in msg
    with pytest.raises(CannotConfirm, match="is absent \\(it is not in this clone\\)"):
        check_commit(r, "0123456789abcdef0123456789abcdef01234567")


def test_baselines_without_a_commit() -> None:
    assert baseline_commit([{"commit_info": {"id": "ab" * 20}}, {"commit_info": {"id": "cd" * 20}}]) == "cd" * 20
    with pytest.raises(CannotConfirm, match="recorded outside a git checkout"):
        baseline_commit([{"commit_info": {"id": "unversioned"}}, {}])


def test_sigint_during_cleanup_waits_for_it(repo: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C while the worktree is being removed is held back until the removal is done."""
    from perfsuite.orchestrate.confirm import worktree

    r, first, _ = repo
    real = worktree._git

    def slow_git(cwd: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        if args[:2] == ("worktree", "remove"):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        return real(cwd, *args, timeout_s=timeout_s)

    monkeypatch.setattr(worktree, "_git", slow_git)
    with pytest.raises(KeyboardInterrupt), temporary_worktree(r, first) as tree:
        pass
    assert not tree.parent.exists() and worktrees(r) == 1
