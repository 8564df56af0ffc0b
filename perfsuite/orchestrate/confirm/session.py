"""Screen, then confirm, inside a ``pytest --benchmark-compare`` session (docs/gate.md): what the screen calls a
regression, and by default what it suspects (an inconclusive screen whose interval reaches beyond its threshold, on a
cell whose A/B pairs are cheap: perfsuite.verdict.confirm_decision.suspected), is confirmed by ONE two-tree A/B of all
their cells (perfsuite.orchestrate.abloop), A = the baselines' commit in a temporary git worktree, B = this tree; each
test then asks :meth:`Confirmation.review` what its verdicts mean.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.facts import TREE
from perfsuite.facts.cells import cell_of
from perfsuite.facts.errors import UsageError
from perfsuite.facts.metrics import aggregates
from perfsuite.facts.vocabulary import pct as _pct
from perfsuite.measure import scheduler
from perfsuite.orchestrate.confirm import machine
from perfsuite.orchestrate.confirm.worktree import CannotConfirm, check_commit, temporary_worktree, toplevel
from perfsuite.orchestrate.plan import METRIC_OF_TEST, pooled_samples, process_entry
from perfsuite.verdict import confirm_decision as decision
from perfsuite.verdict import outcome, sequential
from perfsuite.verdict.confirm_config import ConfirmConfig
from perfsuite.verdict.policy import _LAT
from perfsuite.verdict.values import short_name, trimmed_log_mean

if TYPE_CHECKING:
    from perfsuite.machine.cotenant import ThreadChoice

# What closing the two sides' workers and removing the worktree takes, kept out of the pairs' share of the budget so
# that the whole confirmation ends inside it: campaign 6's budget-stopped confirmations ended 177-184 s into 180 s.
TEARDOWN_S = 5.0


@dataclass(frozen=True)
class Target:
    nodeid: str
    cell_id: str
    test_metric: str  # ttft | tpot | e2el
    metric: str  # median_tpot_ms ...
    screen: str  # regression | inconclusive
    baseline_value: float | None
    screen_value: float | None = None  # the screen's own value of B (this session, the cell's default threads)


@dataclass
class Confirmation:
    config: ConfirmConfig
    inconclusive: str = "suspected"  # which inconclusive screens are confirmed: all | suspected | none
    python: str | None = None  # --perf-confirm-python (over config.python)
    fail_on_inconclusive: bool = False
    foreign: str | None = None  # "incomparable: other hardware ..." when the class is forced onto other hardware
    probe: list[str] = field(default_factory=list)
    findings: dict[tuple[str, str], decision.Finding] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    threads: ThreadChoice | None = None  # the A/B's, once one ran
    out_dir: Path | None = None  # where the operator diffs go (beside --perf-gate-json); None: printed only
    machine_note: str | None = None  # "this machine differs from the baselines' machine ..." (machine.machine_differs)
    libraries: tuple[str, ...] = ()  # a confirmed regression's note when A ran the baselines' library versions

    def review(self, nodeid: str, verdicts: Sequence[Any], fail_msg: str | None, unsure_msg: str | None
               ) -> tuple[str | None, str | None, list[Warning]]:
        """(failure message or None, the screen's inconclusive message or None, the warnings the calling test is to
        raise) after confirmation."""
        screened = [(v.metric, v.kind, self.findings.get((nodeid, v.metric))) for v in verdicts if not v.exact and (
            v.kind == "regression" or (v.kind == "inconclusive" and (nodeid, v.metric) in self.findings))]
        if not screened:  # the screen's own messages, with what changed besides the code
            libs = "".join("\n  " + line for line in self.probe
                           if line.startswith(("the baselines were recorded", "this machine differs")))
            return (fail_msg and fail_msg + libs), (unsure_msg and unsure_msg + libs), []
        out = decision.review(short_name(nodeid), screened, on_unconfirmed=self.config.on_unconfirmed,
                              fail_on_inconclusive=self.fail_on_inconclusive)
        tail = "".join("\n  " + line for line in self.probe)
        warns = [getattr(outcome, category)(msg + tail) for category, msg in out.warnings]
        unsure = None if out.settled else unsure_msg
        if out.failed or any(v.failed and v.exact for v in verdicts):
            lines = "".join("\n  " + line for line in out.fail)
            return (fail_msg or "perfsuite gate:") + lines + tail, unsure, warns
        return None, unsure, warns

    def decisions(self, verdicts: Sequence[Any]) -> list[str] | None:
        """What each of the session's gated metrics ended as (None when no confirmation could run: the screen's
        table stands as the verdict)."""
        if self.foreign or not self.config.enabled:
            return None
        out = [v.kind if v.exact else decision.decided(
            v.kind, self.findings.get((v.test, v.metric)), on_unconfirmed=self.config.on_unconfirmed,
            screen_only=self.inconclusive == "none") for v in verdicts]
        return None if out == [v.kind for v in verdicts] else out  # nothing to confirm: the screen is the decision

    def summary_lines(self) -> list[str]:
        return ([self.foreign] if self.foreign else []) + self.probe + self.summary

    def run(self, ps: Any, items: Sequence[Any], results: Mapping[str, Any], say: Callable[[str], None],
            rootpath: Path) -> None:
        runs = ps.gate.config.newest(ps.gate.runs)
        self.probe = ([self.machine_note] if self.machine_note else []) + machine.probe_lines(ps.peaks, runs)
        libs = machine.version_diffs(ps.facts, runs)
        if libs:  # what changed besides the code: every verdict of this session says so
            self.probe.append(f"the baselines were recorded with other libraries: {'; '.join(libs)}; a change the "
                              "screen sees may be theirs, not the code's")
        for line in self.probe:
            say(f"perfsuite: {line}")
        if self.foreign or not self.config.enabled:
            return
        targets, left = screen(ps, items, results, self.inconclusive, self.config.suspected_budget_s)
        self.summary += [f"screen only {short_name(node)} {metric}: inconclusive, not confirmed: {why}"
                         for node, metric, why in left]
        if not targets:
            return
        t0 = time.monotonic()
        cells = sorted({t.cell_id for t in targets})
        budget = self.config.budget_for(len(cells))
        n_reg = sum(t.screen == "regression" for t in targets)
        if not n_reg:  # suspected screens only: a short A/B (docs/gate.md, "Confirmation by default")
            budget = min(budget, self.config.suspected_budget_s)
        say(f"perfsuite confirm: the stored baselines flag {n_reg} regression(s) and suspect {len(targets) - n_reg} "
            f"more metric(s) of {len(cells)} cell(s); confirming with an A/B against the baselines' commit, budget "
            f"{budget:.0f} s")
        try:
            try:
                found = self._ab(ps, targets, cells, budget, say, rootpath)
            except (SyntaxError, ImportError) as exc:  # a broken module of this tree, met by a lazy import
                raise CannotConfirm(broken_import(exc)) from None
        except CannotConfirm as exc:
            say(f"perfsuite confirm: cannot confirm: {exc}")
            found = {(t.nodeid, t.metric): decision.Finding("unconfirmed", t.metric, reason=str(exc))
                     for t in targets}
        self.findings.update(found)
        early = sum(bool(f.stage) for f in found.values())
        self.summary.append(f"confirm: {len(targets)} metric(s) A/B-confirmed ({n_reg} screened regression(s), "
                            f"{len(targets) - n_reg} suspected: an inconclusive screen whose interval reaches beyond "
                            f"its threshold) in {time.monotonic() - t0:.0f} s"
                            + (f"; {early} refuted by the first stage (a look at "
                                 f"{' or '.join(map(str, decision.REFUTE_LOOKS))} pairs; vLLM cells: "
                                 f"{' or '.join(map(str, sequential.FEW_LOOKS))})" if early else ""))
        if self.threads is not None and self.threads.threads is not None:
            self.summary.append("confirm " + self.threads.line)
        for (nodeid, metric), f in found.items():
            self.summary.append(f"confirm {nodeid.split('::')[-1]} {metric}: {f.kind}"
                                + (f" (B/A {_pct(f.change)} {decision.interval_text(f.ci_low, f.ci_high)}, {f.pairs} "
                                   f"pair(s){', ' + f.stage if f.stage else ''}; {decision.drift_text(f)})"
                                   if f.kind != "unconfirmed" else
                                   f": {f.reason}"))

    def _ab(self, ps: Any, targets: list[Target], cells: list[str], budget: float, say: Callable[[str], None],
            rootpath: Path) -> dict[tuple[str, str], decision.Finding]:
        from perfsuite.machine import cotenant
        from perfsuite.measure.worker import pool
        from perfsuite.orchestrate import abloop, twotree

        t0 = time.monotonic()  # the budget covers the whole confirmation: checkout, probes and pairs
        gate = ps.gate
        runs = gate.config.newest(gate.runs)
        sha = baseline_commit(runs)
        top = toplevel(rootpath)
        src = TREE
        if top != src and top not in src.parents:
            raise CannotConfirm(f"perfsuite is imported from {src}, outside this checkout {top}: an A/B of this "
                                "repository's commits would not run its code; install perfsuite from this checkout "
                                "(pip install -e .)")
        check_commit(top, sha)
        python = self.python or self.config.python
        diffs = machine.version_diffs(ps.facts, runs)
        if diffs and python:
            self.libraries = (f"code and libraries changed together: A ran the baselines' libraries ({python}), B "
                              f"this environment's ({'; '.join(diffs)}); to A/B the libraries alone: perfsuite ab "
                              f"--a . --b . --a-python {python}",)
        if diffs and not python:
            raise CannotConfirm(f"the baselines were recorded with other library versions ({'; '.join(diffs)}), so A "
                                "on this interpreter would not be what was recorded; give A its own interpreter: "
                                "[tool.perfsuite.gate] confirm_python = \"/path/to/.venv/bin/python\" or "
                                "--perf-confirm-python PATH")
        rel = src.relative_to(top)
        wanted = {(t.cell_id, t.test_metric, t.metric) for t in targets}
        threads = cotenant.choose({"A": {}, "B": {}}, self.config.threads)  # before git checks A out
        say(f"perfsuite confirm: {threads.line}")
        self.threads = threads
        with temporary_worktree(top, sha) as wt:
            shared = threads.env + cotenant.hash_seed_env({}, random.Random())  # one hash seed for both zygotes
            sides = {"a": pool.Side(wt / rel, python or sys.executable, "A", shared),
                     "b": pool.Side(src, sys.executable, "B", shared)}
            by_id = {c.id: c for c in ps.settings.cells()}
            args = {"profile": ps.settings.profile.name, "device": ps.settings.device,
                    "backend": ",".join(sorted({by_id[c].backend for c in cells})),
                    "model": ",".join(sorted({by_id[c].model for c in cells}))}
            plans, facts = {}, {}
            for s, side in sides.items():
                try:  # each side on its own, to say which one does not import
                    plan, fact = twotree.prepare({s: side}, args)  # no "cells" glob in args: no serving cells
                except pool.SideError as exc:
                    what = f"A's tree (the baselines' commit {sha[:12]})" if s == "a" else "this tree"
                    raise CannotConfirm(f"{what} does not import: {exc}") from None
                plans[s], facts[s] = {**plan[s], "cells": [c for c in plan[s]["cells"] if c["id"] in cells]}, fact[s]
            metrics = {c: sorted({t.test_metric for t in targets if t.cell_id == c}) for c in cells}
            mems = abloop.members(plans["b"]["cells"], gate.config, gate.config.alpha,
                                  select=lambda cid, m, metric: (cid, m, metric) in wanted)

            suspects = {(t.cell_id, t.test_metric, t.metric) for t in targets
                        if decision.first_stage_applies(t.screen, self.machine_note)}

            def decide(m: abloop.Member) -> tuple[str, str]:
                few = bool(m.cs.looks)  # a vLLM cell: its A/B decides on few pairs
                if m.early is not None:  # refuted by the first stage: it stays so
                    return "refuted", decision.stage_text(few)
                lo, hi = m.cs.interval()
                kind, early = decision.settle(lo, hi, m.cs.estimate(), math.log1p(m.threshold or 0.0), m.cs.data,
                                              (m.cell_id, m.test_metric, m.metric) in suspects, few)
                if early is not None:
                    m.early = (*early, m.cs.n)
                return kind, decision.stage_text(few) if early is not None else ""

            last = [0.0]

            def progress(n: int, elapsed: float) -> None:
                if time.monotonic() - last[0] >= 10.0:
                    last[0] = time.monotonic()
                    say("perfsuite confirm: " + abloop.progress_line(n, elapsed, budget, mems))

            try:
                res = twotree.ab(sides, plans, facts, gate.config, budget_s=budget - TEARDOWN_S, decide=decide,
                                 stop=abloop.all_decided,
                                 workdir=wt.parent, members=mems, metrics=metrics,
                                 say=lambda line: say(f"perfsuite confirm: {line}"), progress=progress, started=t0)
            except (UsageError, pool.SideError) as exc:
                raise CannotConfirm(f"the A/B against the baselines' commit {sha[:12]} failed: {exc}") from None
            extra = self._operators(sides, res.cells, mems, wt.parent, say)
        run = res.run
        say(f"perfsuite confirm: {len(run.pairs)} pair(s) in {time.monotonic() - t0:.0f} s (stopped: {run.stopped});"
            " temporary worktree removed")
        by_key = {(m.cell_id, m.test_metric, m.metric): m for m in mems}
        return {(t.nodeid, t.metric): finding(t, by_key[(t.cell_id, t.test_metric, t.metric)], sha, run.elapsed_s,
                                              gate.config.power, threads.threads,
                                              self.libraries + extra.get(t.cell_id, ()))
                if (t.cell_id, t.test_metric, t.metric) in by_key else decision.Finding(
                    "unconfirmed", t.metric, reason="no statistical A/B policy covers it") for t in targets}

    def _operators(self, sides: dict[str, Any], cells: list[dict[str, Any]], mems: list[Any], workdir: Path,
                   say: Callable[[str], None]) -> dict[str, tuple[str, ...]]:
        """The operator diff of every cell with a confirmed regression (after the decision; never a timed pair)."""
        from perfsuite.orchestrate.opdiff_run import operator_diff
        from perfsuite.verdict.opdiff import lines

        out: dict[str, tuple[str, ...]] = {}
        for cell in cells:
            worst = max((m for m in mems if m.cell_id == cell["id"] and m.kind == "confirmed"),
                        key=lambda m: m.cs.estimate(), default=None)
            if worst is not None:
                say(f"perfsuite confirm: operator diff of {cell['id']} (profile pairs, not timed)")
                d = operator_diff(sides, cell, math.exp(worst.cs.estimate()), workdir, self.out_dir, say=say)
                out[cell["id"]] = tuple(lines(d)) + ((f"full diff and traces: {self.out_dir}",) if self.out_dir
                                                     else ("(--perf-gate-json PATH keeps the full diff and both traces "
                                                           "beside PATH)",))
        return out


def finding(t: Target, m: Any, sha: str, elapsed: float, power: float, threads: int | None = None,
            extra: tuple[str, ...] = ()) -> decision.Finding:
    lo, hi = m.cs.interval()
    n = m.cs.n
    kind = m.kind if m.kind in ("confirmed", "refuted") else "inconclusive"
    if m.early is not None:  # refuted by the first stage: its interval and pairs, not the sequence's since
        lo, hi, n = m.early
    mde = sequential.mde_reached(m.cs, power) if kind == "inconclusive" else math.nan
    a_level = math.exp(trimmed_log_mean(m.a_values[:n])) if m.a_values else None
    change = math.expm1(sequential.hodges_lehmann(m.cs.data[:n])) if n else None
    if threads is None:  # A at the cell's own threads: its level against the baselines is the drift
        drift = a_level / t.baseline_value - 1 if a_level and t.baseline_value else None
    else:  # A at other threads: A's level at the cell's default is the screen's B over the A/B's B/A
        drift = (t.screen_value / (1 + change) / t.baseline_value - 1
                 if t.screen_value and t.baseline_value and change is not None and change > -1 else None)
    return decision.Finding(kind, t.metric, change=change,
                            ci_low=math.expm1(lo), ci_high=math.expm1(hi), pairs=n,
                            mde=math.expm1(mde) if math.isfinite(mde) else None, drift=drift, a_value=a_level,
                            baseline_value=t.baseline_value, commit=sha, elapsed_s=elapsed, threads=threads,
                            extra=extra if kind == "confirmed" else (),
                            stage=decision.stage_text(bool(m.cs.looks)) if m.early is not None else "")


def broken_import(exc: SyntaxError | ImportError) -> str:
    """One line for a module of this tree that does not import, instead of a traceback that loses the screen."""
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
    else:
        where = f"{type(exc).__name__}: {exc}"
    return (f"this tree's perfsuite does not import ({where}); fix it, or gate on the screen alone with "
            "--perf-screen-only; the screen's verdicts below stand unconfirmed")


def baseline_commit(runs: Sequence[Mapping[str, Any]]) -> str:
    """The commit the newest baseline run was recorded at (pytest-benchmark's commit_info)."""
    for run in reversed(runs):
        sha = str((run.get("commit_info") or {}).get("id") or "")
        if len(sha) >= 7 and all(ch in "0123456789abcdef" for ch in sha.lower()):
            return sha
    raise CannotConfirm("the baseline runs carry no commit (recorded outside a git checkout), so there is no tree "
                        "to compare with; record the baselines in a clone (pytest tests/perf --perf-update-baselines)")


def screen_info(cell: Any, res: Any, metric: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parts of a test's extra_info and stats the gate reads, built like harness.PerfRun.run builds them."""
    procs = [p for p in res.processes if metric in p.metrics]
    info = {"cell": cell.as_dict(), "metric": metric, **aggregates(pooled_samples(procs, metric), cell.scenario),
            "generated_tokens": sum(p.metrics[metric].generated_tokens for p in procs),
            "processes": [process_entry(p, metric) for p in procs], "measured_by": dict(res.measured_by)}
    rounds = [r for p in procs for r in p.metrics[metric].rounds_s]
    stats = {"min": min(rounds), "max": max(rounds), "mean": statistics.fmean(rounds),
             "median": statistics.median(rounds)} if rounds else {}
    return info, stats


def pair_seconds(res: Any) -> float | None:
    """What one A/B pair of a cell costs, from this session's processes of it: two of them (load included)."""
    walls = [p.wall_s for p in res.processes if p.wall_s]
    return 2 * statistics.median(walls) if walls else None


def screen(ps: Any, items: Sequence[Any], results: Mapping[str, Any], inconclusive: str = "suspected",
           suspected_budget_s: float = 120.0) -> tuple[list[Target], list[tuple[str, str, str]]]:
    """The stored-baseline verdicts every gated test will get, before the tests run: what needs confirming, and the
    inconclusive screens left unconfirmed (nodeid, metric, why). ``inconclusive``: all | suspected | none."""
    out = []
    left = []
    for item in items:
        if item.nodeid not in ps.gate.family:
            continue
        cell = cell_of(item)
        metric = METRIC_OF_TEST.get(getattr(item, "originalname", ""))
        res = results.get(cell.id) if cell is not None else None
        if cell is None or metric is None or res is None or not any(metric in p.metrics for p in res.processes):
            continue
        info, stats = screen_info(cell, res, metric)
        for v in ps.gate.screen(item.nodeid, info, stats):
            if v.exact or not _LAT.match(v.metric):
                continue
            if v.kind == "inconclusive" and v.ratio is not None and inconclusive == "suspected":
                take, why = decision.suspected(v, pair_seconds(res), suspected_budget_s, sequential.FEW_LOOKS[-1]
                                               if scheduler.few_pairs(cell.backend) else decision.MIN_PAIRS)
                if not take:
                    left.append((item.nodeid, v.metric, why))
                    continue
            if v.kind == "regression" or (v.kind == "inconclusive" and v.ratio is not None and inconclusive != "none"):
                out.append(Target(item.nodeid, cell.id, metric, v.metric, v.kind, v.baseline_value, v.current_value))
    return out, left


def start(ps: Any, *, confirm_inconclusive: bool, python: str | None, allow_foreign: bool,
          screen_only: bool = False, out_dir: Path | None = None) -> Confirmation:
    """At gate setup: the confirmation state of this session, with the foreign-hardware check.
    ``confirm_inconclusive``: every inconclusive screen is confirmed; ``screen_only``: none is (only regressions)."""
    mode = "all" if confirm_inconclusive else "none" if screen_only else "suspected"
    conf = Confirmation(ps.gate.config.confirm or ConfirmConfig(), mode, python, ps.fail_on_inconclusive,
                        out_dir=out_dir)
    try:  # facts are context: a failing probe must not stop the gate
        from perfsuite.machine import doctor

        here = machine.machine_of(doctor.machine_facts(ps.settings.device))
        conf.machine_note = machine.machine_differs(here, ps.gate.config.newest(ps.gate.runs))
    except Exception:
        conf.machine_note = None
    forced = ps.runner_class != ps.facts.get("detected_runner_class")
    if forced and not allow_foreign:
        conf.foreign = machine.foreign_hardware(machine.current_hardware(ps.facts), ps.gate.runs)
        if conf.foreign:
            conf.foreign += (f" (runner class {ps.runner_class} forced); nothing is compared: record baselines "
                             "for this machine's own class, gate with `perfsuite ab`, or pass "
                             "--perf-allow-foreign-hardware to compare anyway")
    return conf
