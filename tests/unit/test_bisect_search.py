"""perfsuite bisect's search on scripted histories: the step is a script of A/B answers, so every branch (found,
skips, an inconclusive step retried and then the narrowed range, no regression) runs without measuring anything."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfsuite.orchestrate import bisect

COMMITS = [f"c{i}" for i in range(1, 17)]  # 16 commits after the good one, oldest first


def scripted(first_bad: int, *, size: float = 0.05, skip: set[str] | None = None,
             undecided: dict[str, int] | None = None):
    """A step answering as an A/B would on a history whose commit ``first_bad`` (1-based) is ``size`` slower:
    ``skip`` trees do not import; ``undecided[c]`` answers inconclusive that many times first."""
    calls: list[tuple[str, float, float | None]] = []
    undecided = dict(undecided or {})

    def step(commit: str, budget: float, tau: float | None) -> bisect.Step:
        calls.append((commit, budget, tau))
        if commit in (skip or set()):
            return bisect.Step(commit, "skip", note="SyntaxError: invalid syntax")
        if undecided.get(commit, 0) > 0:
            undecided[commit] -= 1
            return bisect.Step(commit, "inconclusive", 0.02, -0.03, 0.07, pairs=20, budget_s=budget)
        bad = int(commit[1:]) >= first_bad
        change = size if bad else 0.0
        est, half = math.log1p(change), 0.01
        verdict = "bad" if tau is None and bad else bisect.classify(est - half, est + half, est, tau or 0.0)
        return bisect.Step(commit, verdict, change, math.expm1(est - half), math.expm1(est + half), 20, 30.0, budget)

    return step, calls


@pytest.mark.parametrize("first_bad", [1, 2, 3, 8, 9, 15, 16])
def test_the_first_bad_commit_is_found_in_log2_steps(first_bad: int) -> None:
    step, calls = scripted(first_bad)
    res = bisect.search(COMMITS, step, 120.0, good="g")
    assert res.stopped == "found" and res.first_bad == f"c{first_bad}" and res.candidates == [f"c{first_bad}"]
    assert calls[0] == ("c16", 120.0, None)  # the bad end first: it sets tau
    assert res.tau == pytest.approx(math.log1p(0.05) / 2)
    assert len(calls) <= 1 + math.ceil(math.log2(len(COMMITS)))
    assert [s.commit for s in res.steps] == [c for c, _, _ in calls]


def test_a_tree_that_does_not_import_is_skipped_and_the_search_goes_around_it() -> None:
    step, calls = scripted(9, skip={"c8", "c9"})
    res = bisect.search(COMMITS, step, 60.0)
    assert res.stopped == "skipped" and res.first_bad is None
    assert res.candidates == ["c8", "c9", "c10"]  # as git bisect: one of the skipped, or the first known bad one
    step, _ = scripted(10, skip={"c8"})
    res = bisect.search(COMMITS, step, 60.0)
    assert res.first_bad == "c10" and any(s.verdict == "skip" for s in res.steps)


def test_an_inconclusive_step_is_retried_with_twice_the_budget() -> None:
    step, calls = scripted(5, undecided={"c8": 1})
    res = bisect.search(COMMITS, step, 60.0)
    assert res.first_bad == "c5"
    retried = [(c, b) for c, b, _ in calls if c == "c8"]
    assert retried == [("c8", 60.0), ("c8", 120.0)]


def test_a_step_undecided_twice_ends_the_search_with_the_range_it_narrowed_to() -> None:
    step, calls = scripted(5, undecided={"c4": 2})
    res = bisect.search(COMMITS, step, 60.0)
    assert res.stopped == "inconclusive" and res.first_bad is None
    assert res.candidates and "c5" in res.candidates and len(res.candidates) < len(COMMITS)
    assert res.candidates == COMMITS[COMMITS.index(res.candidates[0]):COMMITS.index(res.candidates[-1]) + 1]


def test_no_regression_at_the_bad_end_stops_at_once() -> None:
    def step(commit: str, budget: float, tau: float | None) -> bisect.Step:
        return bisect.Step(commit, "good", 0.001, -0.01, 0.012)

    res = bisect.search(COMMITS, step, 60.0)
    assert res.stopped == "no regression" and len(res.steps) == 1 and res.first_bad is None


def test_classify_splits_at_tau() -> None:
    tau = math.log1p(0.025)
    assert bisect.classify(0.01, 0.08, 0.05, tau) == "bad"
    assert bisect.classify(-0.01, 0.02, 0.005, tau) == "good"
    assert bisect.classify(-0.01, 0.06, 0.02, tau) == "inconclusive"


def _repo(tmp_path: Path) -> tuple[Path, list[str]]:
    r = tmp_path / "repo"
    r.mkdir()
    git = lambda *a: subprocess.run(["git", *a], cwd=r, check=True, capture_output=True, text=True).stdout.strip()  # noqa: E731
    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    shas = []
    for i in range(4):
        (r / "f").write_text(str(i))
        git("add", "f")
        git("commit", "-qm", f"commit {i}")
        shas.append(git("rev-parse", "HEAD"))
    return r, shas


def test_first_parent_commits_and_bad_revisions(tmp_path: Path) -> None:
    repo, shas = _repo(tmp_path)
    assert bisect.first_parent_commits(repo, shas[0], shas[3]) == shas[1:]
    assert bisect.resolve(repo, "HEAD~3", "good") == shas[0]
    assert bisect.subject(repo, shas[2]) == "commit 2"
    with pytest.raises(bisect.BisectError, match="not a commit of"):
        bisect.resolve(repo, "nope", "good")
    with pytest.raises(bisect.BisectError, match=r"not an ancestor.*swap them"):
        bisect.first_parent_commits(repo, shas[3], shas[0])
    with pytest.raises(bisect.BisectError, match="the same commit"):
        bisect.first_parent_commits(repo, shas[2], shas[2])


def test_the_command_writes_every_step_and_leaves_no_worktree_on_ctrl_c(tmp_path: Path, monkeypatch, capsys) -> None:
    """Ctrl-C during the second step: exit 130, the step done is in --json, no worktree is left registered (the steps
    are scripted; the worktree of the good end is real)."""
    from perfsuite.cli import main as cli

    repo, shas = _repo(tmp_path)
    (repo / "pyproject.toml").write_text("[tool.perfsuite]\n")
    calls = []

    def step(self, commit: str, budget: float, tau: float | None) -> bisect.Step:
        calls.append(commit)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return bisect.Step(commit, "bad", 0.05, 0.03, 0.07, 10, 1.0, budget)

    monkeypatch.setattr(bisect.Bisection, "step", step)
    monkeypatch.chdir(repo)
    out = tmp_path / "bisect.json"
    rc = cli(["bisect", "--good", shas[0], "--bad", shas[3], "--budget", "1m", "--json", str(out)])
    assert rc == 130 and len(calls) == 2
    data = json.loads(out.read_text())
    assert data["stopped"] == "interrupted" and [s["commit"] for s in data["steps"]] == calls[:1]
    assert data["good"] == shas[0] and data["bad"] == shas[3] and data["first_bad"] is None
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True)
    assert listed.stdout.count("worktree ") == 1, listed.stdout
    assert "interrupted after 1 step(s); no worktree or worker is left" in capsys.readouterr().out


def test_bad_revisions_are_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    from perfsuite.cli import main as cli

    repo, shas = _repo(tmp_path)
    monkeypatch.chdir(repo)
    assert cli(["bisect", "--good", shas[3], "--bad", shas[0]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfsuite bisect: --good") and "swap them" in err and "\n" not in err


def test_an_undecided_search_over_a_long_range_answers_with_the_command_that_narrows_it() -> None:
    """A 158-commit range stayed undecided at its first step (benchmarks/data/bisect-ttft-20261206): the answer names
    the range and the command over it, not 158 hashes."""
    import argparse

    from perfsuite.adapters.cli.bisect import _answer

    commits = [f"{i:040x}" for i in range(1, 31)]
    res = bisect.Result("f" * 40, commits[-1], commits)
    res.stopped, res.candidates = "inconclusive", commits[10:]
    args = argparse.Namespace(budget="4m", profile="smoke", backend="torch", model=None, device="cpu",
                              cells="torch-*")
    (line,) = _answer(Path("."), res, args)
    assert "among the 20 first-parent commits after " + commits[9][:12] + " up to " + commits[-1][:12] in line
    assert (f"`perfsuite bisect --good {commits[9][:12]} --bad {commits[-1][:12]} --budget 960s --backend torch "
            "--cells 'torch-*'`") in line
    res.candidates = commits[:3]
    assert _answer(Path("."), res, args) == ["no single commit (a step stayed undecided): the first bad one is among "
                                             + ", ".join(c[:12] for c in commits[:3])]
    res.candidates = commits[:12]
    assert f"after {'f' * 12} up to {commits[11][:12]}" in _answer(Path("."), res, args)[0]
    res.stopped = "skipped"  # untestable commits around it: the same range, no longer budget
    (line,) = _answer(Path("."), res, args)
    assert "commits around it do not run" in line and "longer budget" not in line and "--budget" not in line


def test_a_step_whose_side_stops_taking_turns_is_skipped_not_a_traceback(tmp_path: Path, monkeypatch) -> None:
    """A LockstepError from the pairs (a side not ready after its timeout, or one that stopped taking turns) skips
    that commit, as a tree that does not import does; before, it ended the whole search with a traceback."""
    from perfsuite.measure.lockstep import LockstepError
    from perfsuite.orchestrate import twotree

    repo, shas = _repo(tmp_path)
    monkeypatch.setattr(twotree, "prepare", lambda sides, args: ({}, {}))

    def ab(*a, **k):
        raise LockstepError("side B is not taking turns")

    monkeypatch.setattr(twotree, "ab", ab)
    said: list[str] = []
    good = SimpleNamespace(python=sys.executable)
    search = bisect.Bisection(repo, Path("."), good, {}, SimpleNamespace(ab_threshold=0.03), say=said.append)
    step = search.step(shas[2], 60.0, 0.02)
    assert (step.commit, step.verdict, step.note) == (shas[2], "skip", "side B is not taking turns")
    assert said == [f"{shas[2][:12]}: skipped: side B is not taking turns"]
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True)
    assert listed.stdout.count("worktree ") == 1  # the step's worktree is gone


def test_bisect_takes_the_suite_lock_of_an_ordinary_run(tmp_path: Path, monkeypatch, capsys) -> None:
    """Another perfsuite run measuring: bisect waits for it like a pytest run; PERFSUITE_LOCK_WAIT_S=0 refuses at
    once, in one line, with no step run and no worktree left."""
    from perfsuite.cli import main as cli
    from perfsuite.machine.preflight import SuiteLock

    repo, shas = _repo(tmp_path)
    (repo / "pyproject.toml").write_text("[tool.perfsuite]\n")
    monkeypatch.setattr(bisect.Bisection, "step", lambda *a: pytest.fail("a step ran beside another run"))
    monkeypatch.chdir(repo)
    monkeypatch.setenv("PERFSUITE_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.setenv("PERFSUITE_LOCK_WAIT_S", "0")
    with SuiteLock(exclusive=False, measuring=True, directory=tmp_path / "lock"):
        assert cli(["bisect", "--good", shas[0], "--bad", shas[3]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfsuite bisect: another perfsuite run is measuring on this machine") and "\n" not in err
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True)
    assert listed.stdout.count("worktree ") == 1, listed.stdout
