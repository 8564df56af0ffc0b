"""Screen, then confirm, inside a ``pytest --benchmark-compare`` session (docs/gate.md): what the screen calls a
regression is confirmed by ONE two-tree A/B of all its cells (perfsuite.orchestrate.abloop), A = the baselines' commit
in a temporary git worktree, B = this tree; each test then asks :meth:`Confirmation.review` what its verdicts mean.
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
    confirm_inconclusive: bool = False
    python: str | None = None  # --perf-confirm-python (over config.python)
    fail_on_inconclusive: bool = False
    foreign: str | None = None  # "incomparable: other hardware ..." when the class is forced onto other hardware
    probe: list[str] = field(default_factory=list)
    findings: dict[tuple[str, str], decision.Finding] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    threads: ThreadChoice | None = None  # the A/B's, once one ran

    def review(self, nodeid: str, verdicts: Sequence[Any], fail_msg: str | None, unsure_msg: str | None
               ) -> tuple[str | None, str | None, list[Warning]]:
        """(failure message or None, the screen's inconclusive message or None, the warnings the calling test is to
        raise) after confirmation."""
        screened = [(v.metric, v.kind, self.findings.get((nodeid, v.metric))) for v in verdicts if not v.exact and (
            v.kind == "regression" or (v.kind == "inconclusive" and (nodeid, v.metric) in self.findings))]
        if not screened:
            return fail_msg, unsure_msg, []
        out = decision.review(short_name(nodeid), screened, on_unconfirmed=self.config.on_unconfirmed,
                              fail_on_inconclusive=self.fail_on_inconclusive)
        tail = "".join("\n  " + line for line in self.probe)
        warns = [getattr(outcome, category)(msg + tail) for category, msg in out.warnings]
        unsure = None if out.settled else unsure_msg
        if out.failed or any(v.failed and v.exact for v in verdicts):
            lines = "".join("\n  " + line for line in out.fail)
            return (fail_msg or "perfsuite gate:") + lines + tail, unsure, warns
        return None, unsure, warns

    def summary_lines(self) -> list[str]:
        return ([self.foreign] if self.foreign else []) + self.probe + self.summary

    def run(self, ps: Any, items: Sequence[Any], results: Mapping[str, Any], say: Callable[[str], None],
            rootpath: Path) -> None:
        gate = ps.gate
        self.probe = machine.probe_lines(ps.peaks, gate.runs[-gate.config.baseline_runs:])
        for line in self.probe:
            say(f"perfsuite: {line}")
        if self.foreign or not self.config.enabled:
            return
        targets = screen(ps, items, results, self.confirm_inconclusive)
        if not targets:
            return
        cells = sorted({t.cell_id for t in targets})
        budget = self.config.budget_for(len(cells))
        say(f"perfsuite confirm: the stored baselines flag {len(targets)} metric(s) of {len(cells)} cell(s); "
            f"confirming with an A/B against the baselines' commit, budget {budget:.0f} s")
        try:
            found = self._ab(ps, targets, cells, budget, say, rootpath)
        except CannotConfirm as exc:
            say(f"perfsuite confirm: cannot confirm: {exc}")
            found = {(t.nodeid, t.metric): decision.Finding("unconfirmed", t.metric, reason=str(exc))
                     for t in targets}
        self.findings.update(found)
        if self.threads is not None and self.threads.threads is not None:
            self.summary.append("confirm " + self.threads.line)
        for (nodeid, metric), f in found.items():
            self.summary.append(f"confirm {nodeid.split('::')[-1]} {metric}: {f.kind}"
                                + (f" (B/A {_pct(f.change)} [{_pct(f.ci_low)}, {_pct(f.ci_high)}], {f.pairs} "
                                   f"pair(s); {decision.drift_text(f)})" if f.kind != "unconfirmed" else
                                   f": {f.reason}"))

    def _ab(self, ps: Any, targets: list[Target], cells: list[str], budget: float, say: Callable[[str], None],
            rootpath: Path) -> dict[tuple[str, str], decision.Finding]:
        from perfsuite.machine import cotenant
        from perfsuite.measure.worker import pool
        from perfsuite.orchestrate import abloop

        t0 = time.monotonic()  # the budget covers the whole confirmation: checkout, probes and pairs
        gate = ps.gate
        runs = gate.runs[-gate.config.baseline_runs:]
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
            plans: dict[str, dict[str, Any]] = {}
            facts: dict[str, dict[str, Any]] = {}
            for s, side in sides.items():
                try:
                    pool.probe(side)
                    plans[s] = pool.plan(side, args)
                    facts[s] = pool.probe(side, ("perfsuite.measure.worker.child", *pool.preload_modules(
                        {c["backend"] for c in plans[s]["cells"]})))
                except pool.SideError as exc:
                    what = f"A's tree (the baselines' commit {sha[:12]})" if s == "a" else "this tree"
                    raise CannotConfirm(f"{what} does not import: {exc}") from None
                plans[s] = {**plans[s], "cells": [c for c in plans[s]["cells"] if c["id"] in cells]}
            try:
                cell_dicts = abloop.same_cells(plans["a"], plans["b"])
            except UsageError as exc:
                raise CannotConfirm(f"the baselines' commit {sha[:12]} measures differently: {exc}") from None
            mems = abloop.members(cell_dicts, gate.config, gate.config.alpha,
                                  select=lambda cid, m, metric: (cid, m, metric) in wanted)
            metrics = {c: sorted({t.test_metric for t in targets if t.cell_id == c}) for c in cells}
            left = budget - (time.monotonic() - t0)  # what the worktree, the probes and the plans left of it
            lockstep, pairing = abloop.pairing("lockstep", facts)
            say(f"perfsuite confirm: {pairing}")
            run = self._pairs(sides, plans, cell_dicts, mems, left - TEARDOWN_S, metrics, say, wt.parent, lockstep)
        say(f"perfsuite confirm: {len(run.pairs)} pair(s) in {time.monotonic() - t0:.0f} s (stopped: {run.stopped});"
            " temporary worktree removed")
        by_key = {(m.cell_id, m.test_metric, m.metric): m for m in mems}
        return {(t.nodeid, t.metric): finding(t, by_key[(t.cell_id, t.test_metric, t.metric)], sha, run.elapsed_s,
                                              gate.config.power, threads.threads)
                if (t.cell_id, t.test_metric, t.metric) in by_key else decision.Finding(
                    "unconfirmed", t.metric, reason="no statistical A/B policy covers it") for t in targets}

    @staticmethod
    def _pairs(sides: dict[str, Any], plans: dict[str, Any], cells: list[dict[str, Any]], mems: list[Any],
               budget: float, metrics: dict[str, list[str]], say: Callable[[str], None], workdir: Path,
               lockstep: bool = False) -> Any:
        from perfsuite.measure.worker import pool
        from perfsuite.orchestrate import abloop

        def decide(m: abloop.Member) -> tuple[str, str]:
            lo, hi = m.cs.interval()
            return decision.classify(lo, hi, m.cs.estimate(), math.log1p(m.threshold or 0.0), m.cs.n), ""

        last = [0.0]

        def progress(n: int, elapsed: float) -> None:
            if time.monotonic() - last[0] >= 10.0:
                last[0] = time.monotonic()
                say("perfsuite confirm: " + abloop.progress_line(n, elapsed, budget, mems))

        preload = pool.preload_modules({c["backend"] for c in cells})
        pools, line = pool.pair_pools(sides, {s: workdir / f"workers-{s}" for s in sides}, preload)
        say(f"perfsuite confirm: {line}")
        try:
            return abloop.run_pairs(pools, plans, cells, mems, budget_s=budget, max_pairs=1000, rng=random.Random(),
                                    decide=decide, stop=lambda ms: "decided" if all(m.kind != "open" for m in ms)
                                    else None, metrics=metrics, progress=progress, lockstep=lockstep)
        except (UsageError, pool.SideError) as exc:
            raise CannotConfirm(f"the A/B failed: {exc}") from None
        finally:
            for pl in pools.values():
                pl.close()


def finding(t: Target, m: Any, sha: str, elapsed: float, power: float, threads: int | None = None
            ) -> decision.Finding:
    lo, hi = m.cs.interval()
    kind = m.kind if m.kind in ("confirmed", "refuted") else "inconclusive"
    mde = sequential.mde_reached(m.cs, power) if kind == "inconclusive" else math.nan
    a_level = math.exp(trimmed_log_mean(m.a_values)) if m.a_values else None
    change = math.expm1(m.cs.estimate()) if m.cs.n else None
    if threads is None:  # A at the cell's own threads: its level against the baselines is the drift
        drift = a_level / t.baseline_value - 1 if a_level and t.baseline_value else None
    else:  # A at other threads: A's level at the cell's default is the screen's B over the A/B's B/A
        drift = (t.screen_value / (1 + change) / t.baseline_value - 1
                 if t.screen_value and t.baseline_value and change is not None and change > -1 else None)
    return decision.Finding(kind, t.metric, change=change,
                            ci_low=math.expm1(lo), ci_high=math.expm1(hi), pairs=m.cs.n,
                            mde=math.expm1(mde) if math.isfinite(mde) else None, drift=drift, a_value=a_level,
                            baseline_value=t.baseline_value, commit=sha, elapsed_s=elapsed, threads=threads)


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


def screen(ps: Any, items: Sequence[Any], results: Mapping[str, Any], inconclusive: bool) -> list[Target]:
    """The stored-baseline verdicts every gated test will get, before the tests run: what needs confirming."""
    out = []
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
            if v.kind == "regression" or (inconclusive and v.kind == "inconclusive" and v.ratio is not None):
                out.append(Target(item.nodeid, cell.id, metric, v.metric, v.kind, v.baseline_value, v.current_value))
    return out


def start(ps: Any, *, confirm_inconclusive: bool, python: str | None, allow_foreign: bool) -> Confirmation:
    """At gate setup: the confirmation state of this session, with the foreign-hardware check."""
    conf = Confirmation(ps.gate.config.confirm or ConfirmConfig(), confirm_inconclusive, python,
                        ps.fail_on_inconclusive)
    forced = ps.runner_class != ps.facts.get("detected_runner_class")
    if forced and not allow_foreign:
        conf.foreign = machine.foreign_hardware(machine.current_hardware(ps.facts), ps.gate.runs)
        if conf.foreign:
            conf.foreign += (f" (runner class {ps.runner_class} forced); nothing is compared: record baselines "
                             "for this machine's own class, gate with `perfsuite ab`, or pass "
                             "--perf-allow-foreign-hardware to compare anyway")
    return conf
