"""``perfsuite bisect``'s search (docs/gate.md, "perfsuite bisect: which commit"): which first-parent commit between
a good and a bad revision made it slower, each step a budgeted two-tree A/B of one commit against the good end. The
search itself is pure (the step is handed in), so every branch is tested on a scripted history. ``tau``, the split
point, is half the bad end's own change (at least the gate's A/B threshold): a commit is called by the side it is
closer to."""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.verdict import confirm_decision as decision


class BisectError(Exception):
    """Bad revisions or a history bisect cannot search; one line with the fix."""


@dataclass(frozen=True)
class Step:
    """One A/B of ``commit`` (B) against the good end (A)."""

    commit: str
    verdict: str  # bad | good | inconclusive | skip
    change: float | None = None  # B / A - 1 of the tracked metric (the worst of them)
    low: float | None = None
    high: float | None = None
    pairs: int = 0
    seconds: float = 0.0
    budget_s: float = 0.0
    note: str = ""  # skip: why the tree does not import; the metric the change is of
    subject: str = ""


@dataclass
class Result:
    good: str
    bad: str
    commits: list[str]  # first-parent, oldest first, good excluded, bad included
    steps: list[Step] = field(default_factory=list)
    first_bad: str | None = None
    candidates: list[str] = field(default_factory=list)  # the range the search narrowed to (first_bad among them)
    stopped: str = ""  # found | no regression | inconclusive | interrupted | skipped
    tau: float | None = None
    operators: dict[str, Any] | None = None  # the first bad commit against its parent (perfsuite.verdict.opdiff)

    def as_dict(self) -> dict[str, Any]:
        return {"good": self.good, "bad": self.bad, "first_bad": self.first_bad, "candidates": self.candidates,
                "stopped": self.stopped, "tau": self.tau, "commits": self.commits,
                "steps": [asdict(s) for s in self.steps], "operators": self.operators}


def classify(low: float, high: float, estimate: float, tau: float) -> str:
    """Log-scale interval of log(commit / good) and the split point ``tau`` -> bad | good | inconclusive (the
    confirmation's rule: perfsuite.verdict.confirm_decision.classify)."""
    return {"confirmed": "bad", "refuted": "good"}.get(decision.classify(low, high, estimate, tau, 2), "inconclusive")


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BisectError(f"git {' '.join(args)}: {(proc.stderr.strip().splitlines() or ['failed'])[-1]}")
    return proc.stdout.strip()


def resolve(repo: Path, rev: str, what: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except BisectError:
        raise BisectError(f"--{what} {rev!r} is not a commit of {repo}; give a sha, tag or branch (git log --oneline "
                          "lists them)") from None


def first_parent_commits(repo: Path, good: str, bad: str) -> list[str]:
    """The first-parent commits after ``good`` up to ``bad``, oldest first (``good`` must be on that line)."""
    if subprocess.run(["git", "merge-base", "--is-ancestor", good, bad], cwd=repo).returncode != 0:
        raise BisectError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}; swap them, or pick a good "
                          "commit on the bad one's history")
    commits = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
    if not commits:
        raise BisectError(f"--good {good[:12]} and --bad {bad[:12]} are the same commit: nothing to bisect")
    if commits[-1] != bad:
        raise BisectError(f"--good {good[:12]} is not on the first-parent line of --bad {bad[:12]}; pick a good commit"
                          " that `git log --first-parent` of the bad one lists")
    return commits


def subject(repo: Path, commit: str) -> str:
    try:
        return _git(repo, "log", "-1", "--format=%s", commit)
    except BisectError:
        return ""


StepFn = Callable[[str, float, float | None], Step]  # (commit, budget_s, tau) -> Step


def search(commits: Sequence[str], step: StepFn, budget_s: float, *, good: str = "", tau_floor: float = 0.01,
           result: Result | None = None) -> Result:
    """Binary search for the first bad commit. ``step(commit, budget_s, tau)`` runs one A/B (``tau`` None: the bad
    end, which sets ``tau``). ``result`` is filled as the search goes (the caller keeps it on Ctrl-C)."""
    res = result or Result(good, commits[-1], list(commits))

    def run(i: int, tau: float | None) -> Step:
        s = step(commits[i], budget_s, tau)
        res.steps.append(s)
        if s.verdict == "inconclusive":  # once more with twice the budget
            s = step(commits[i], 2 * budget_s, tau)
            res.steps.append(s)
        return s

    end = run(len(commits) - 1, None)
    if end.verdict != "bad":
        res.stopped = {"good": "no regression", "skip": "skipped"}.get(end.verdict, "inconclusive")
        res.candidates = list(commits) if end.verdict == "inconclusive" else []
        return res
    res.tau = tau = max(tau_floor, math.log1p(end.change or 0.0) / 2)
    lo, hi = -1, len(commits) - 1  # commits[lo] good (-1: the good end), commits[hi] bad
    skipped: set[int] = set()
    while True:
        between = [i for i in range(lo + 1, hi) if i not in skipped]
        if not between:
            break
        mid = min(between, key=lambda i: (abs(i - (lo + hi) / 2), i))
        s = run(mid, tau)
        if s.verdict == "bad":
            hi = mid
        elif s.verdict == "good":
            lo = mid
        elif s.verdict == "skip":
            skipped.add(mid)
        else:
            res.stopped, res.candidates = "inconclusive", list(commits[lo + 1:hi + 1])
            return res
    res.candidates = list(commits[lo + 1:hi + 1])
    res.first_bad = commits[hi] if len(res.candidates) == 1 else None
    res.stopped = "found" if res.first_bad else "skipped"
    return res


# ------------------------------------------------------------------------------------------- the real steps
@dataclass
class Bisection:
    """A search over a repository's history: the good end's tree stays checked out; each step checks out one commit
    and runs a two-tree A/B of it against the good end (perfsuite.orchestrate.twotree)."""

    top: Path  # the repository (this checkout's top level)
    rel: Path  # where the perfsuite package's parent lies inside it
    good_side: Any  # perfsuite.measure.worker.pool.Side of the good end's worktree
    plan_args: dict[str, Any]
    config: Any  # GateConfig
    env: tuple[tuple[str, str], ...] = ()
    python: str = ""
    say: Callable[[str], None] = print
    tracked: tuple[str, str, str] | None = None  # (cell, test metric, metric) the bad end regressed most
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)

    def step(self, commit: str, budget_s: float, tau: float | None) -> Step:
        from perfsuite.facts.errors import UsageError
        from perfsuite.measure.lockstep import LockstepError
        from perfsuite.measure.worker import pool
        from perfsuite.orchestrate import abloop, twotree
        from perfsuite.orchestrate.confirm.worktree import temporary_worktree

        t0 = time.monotonic()
        label = f"the bad end {commit[:12]}" if tau is None else commit[:12]
        with temporary_worktree(self.top, commit) as wt:
            side_b = pool.Side(wt / self.rel, self.python or self.good_side.python, "B", self.env)
            sides = {"a": self.good_side, "b": side_b}
            try:
                plans, facts = twotree.prepare(sides, self.plan_args)
            except pool.SideError as exc:
                self.say(f"{label}: skipped: its tree does not run ({exc})")
                return Step(commit, "skip", note=str(exc), seconds=time.monotonic() - t0, budget_s=budget_s)
            floor = math.log1p(self.config.ab_threshold)

            def decide(m: Any) -> tuple[str, str]:
                lo, hi = m.cs.interval()
                kind = decision.classify(lo, hi, m.cs.estimate(), floor if tau is None else tau, m.cs.n)
                return {"confirmed": "regression", "refuted": "unchanged"}.get(kind, "open"), ""

            select = (lambda c, t, m: (c, t, m) == self.tracked) if self.tracked else None
            try:
                res = twotree.ab(sides, plans, facts, self.config, budget_s=budget_s, decide=decide, select=select,
                                 stop=abloop.all_decided)
            except (UsageError, LockstepError) as exc:  # a side that never got ready or stopped taking turns
                self.say(f"{label}: skipped: {exc}")
                return Step(commit, "skip", note=str(exc), seconds=time.monotonic() - t0, budget_s=budget_s)
        worst = max(res.members, key=lambda m: m.cs.estimate() if m.cs.n else -math.inf)
        if tau is None:
            self.tracked = (worst.cell_id, worst.test_metric, worst.metric)
            self.cells = {c["id"]: c for c in res.cells}
        m = next(x for x in res.members if (x.cell_id, x.test_metric, x.metric) == self.tracked) if self.tracked \
            else worst
        lo, hi = m.cs.interval()
        verdict = {"regression": "bad", "unchanged": "good"}.get(m.kind, "inconclusive")
        s = Step(commit, verdict, math.expm1(m.cs.estimate()), math.expm1(lo), math.expm1(hi), m.cs.n,
                 time.monotonic() - t0, budget_s, note=f"{m.cell_id} {m.metric}", subject=subject(self.top, commit))
        self.say(f"{label} {s.subject[:60]!r}: B/A {s.change:+.1%} {decision.interval_text(s.low, s.high)}, "
                 f"{s.pairs} pair(s) in {s.seconds:.0f} s: {verdict}")
        return s
