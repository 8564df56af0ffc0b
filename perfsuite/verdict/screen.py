"""What the pytest plugin calls: :class:`GateSession` (one per pytest session that compares against baselines).

Each test is decided while it runs (the failing test is the regressed one). Every selected cell has been measured
by then (perfsuite.orchestrate.plan), so the family counts exactly the gated tests that ran with a baseline measured
the same way; each gets ``alpha / family``, split equally over its statistical metrics. The summary adds
Holm-adjusted p-values (informational; Holm never contradicts a Bonferroni failure).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfsuite.facts.cells import cell_of
from perfsuite.verdict import outputs, report, sequential, stats, values
from perfsuite.verdict.decide import Verdict, decide
from perfsuite.verdict.estimate import comparable_runs, estimate
from perfsuite.verdict.policy import GateConfig, parse_config
from perfsuite.verdict.runs import index, match


def baseline_span_s(runs: Sequence[Mapping[str, Any]]) -> float | None:
    """Seconds between the first and the last run (pytest-benchmark's ``datetime``); None if unknown."""
    try:
        times = [dt.datetime.fromisoformat(str(r.get("datetime"))).timestamp() for r in runs]
    except ValueError:
        return None
    return max(times) - min(times) if len(times) >= 2 else None


def is_contended(run: Mapping[str, Any]) -> bool:
    """A stored run recorded on a busy machine (preflight on_busy = "mark"): kept, but never a baseline."""
    meta = (run.get("machine_info") or {}).get("perfsuite") or {}
    return bool(meta.get("contended") or (meta.get("preflight") or {}).get("contended"))


class GateSession:
    def __init__(self, baseline_runs: Sequence[Mapping[str, Any]], config: GateConfig | Mapping[str, Any] | None
                 = None) -> None:
        self.config = config if isinstance(config, GateConfig) else parse_config(config)
        self.skipped_contended = sum(is_contended(r) for r in baseline_runs)
        self.runs = [r for r in baseline_runs if not is_contended(r)]
        self._by_full, self._by_name = index(self.runs)
        self.family: dict[str, int] = {}  # nodeids of the gated tests (each shares alpha over its own metrics)
        self.verdicts: list[Verdict] = []
        self.hints: dict[str, str] = {}
        self.changed: dict[str, str] = {}  # nodeid -> the outputs guard's message, for tests whose tokens changed

    def set_family(self, items: Sequence[Any], results: Mapping[str, Any]) -> None:
        """After measuring: the selected perf tests whose cell ran and that have a comparable baseline."""
        self.family = {}
        for item in items:
            cell = cell_of(item)
            res = results.get(cell.id) if cell is not None else None
            if res is None or res.skip or res.error or not res.processes:
                continue
            base = match(item.nodeid, self._by_full, self._by_name)
            if base and comparable_runs({"extra_info": {"measured_by": res.measured_by}}, base)[0]:
                self.family[item.nodeid] = 1

    def add_to_family(self, nodeids: Sequence[str]) -> None:
        """Tests measured outside :meth:`set_family`'s cells (the serving cells) join the family when they have a
        baseline, so that they share alpha with the others."""
        self.family.update({nodeid: 1 for nodeid in nodeids if match(nodeid, self._by_full, self._by_name)})

    def check(self, nodeid: str, extra_info: Mapping[str, Any], stats_: Mapping[str, Any] | None = None
              ) -> list[Verdict]:
        """Verdicts of one benchmark (its ``extra_info`` as just measured), recorded for :meth:`summary_table`."""
        out = self.screen(nodeid, extra_info, stats_)
        self.verdicts.extend(out)
        for v in out:
            if v.kind == "inconclusive" and v.ratio is not None:
                self.hints[nodeid] = self._settle_hint(v, extra_info)
        return out

    def outputs(self, nodeid: str, extra_info: Mapping[str, Any]) -> outputs.OutputsCheck:
        """This test's generated tokens against the newest comparable baseline run that recorded them."""
        base, _ = comparable_runs({"extra_info": dict(extra_info)}, match(nodeid, self._by_full, self._by_name))
        recorded = [b["extra_info"]["outputs"] for b in base if (b.get("extra_info") or {}).get("outputs")]
        res = outputs.check(extra_info.get("outputs"), recorded[-1] if recorded else None,
                            str((extra_info.get("cell") or {}).get("backend", "")))
        if res.kind == "changed":
            self.changed[nodeid] = res.message
        return res

    def screen(self, nodeid: str, extra_info: Mapping[str, Any], stats_: Mapping[str, Any] | None = None
               ) -> list[Verdict]:
        """The verdicts :meth:`check` would give, recorded nowhere (the confirmation screens before the tests)."""
        base = match(nodeid, self._by_full, self._by_name)
        if not base:
            return []
        current = {"extra_info": dict(extra_info), "stats": dict(stats_ or {})}
        pols = [p for p in self.config.policies_for(values.cell_id(current), values.short_name(nodeid))
                if values.run_value(current, p.metric) is not None]  # a policy gates benchmarks that have its metric
        n_stat = sum(not p.exact for p in pols)
        alpha = self.config.alpha / (max(len(self.family), 1) * max(n_stat, 1))
        return [decide(estimate(nodeid, p, base, [current], self.config), alpha, self.config.power) for p in pols]

    def _settle_hint(self, v: Verdict, extra_info: Mapping[str, Any]) -> str:
        """The `perfsuite ab` command (with a budget sized from this run's own process spread) that settles it."""
        bench = {"extra_info": extra_info}
        pv = values.process_values(bench, v.metric)
        procs = extra_info.get("processes") or []
        walls = [float(p.get("wall_s") or 0) for p in procs if p.get("wall_s")]
        budget = None
        if pv and len(pv) >= 3 and walls:
            sigma_pair = math.sqrt(2) * float(np.std(np.log(pv), ddof=1))
            tau, eps = math.log1p(self.config.ab_threshold), math.log1p(self.config.ab_margin)
            d = math.log(v.ratio) if v.ratio else 0.0
            target = d if abs(d) > tau else 0.0
            n = sequential.pairs_needed(sigma_pair, target, self.config.alpha / 3, tau, eps)
            if n is not None:
                budget = 20 + 1.2 * n * 2 * float(np.mean(walls))
        ref = next((sha for run in reversed(self.runs) if (sha := (run.get("commit_info") or {}).get("id"))), None)
        return report.ab_command(values.cell_id(bench), ref, budget)

    @staticmethod
    def failure_message(verdicts: Sequence[Verdict]) -> str | None:
        bad = [v for v in verdicts if v.failed]
        return "perfsuite gate: significant regression beyond threshold\n" + "\n".join(
            "  " + report.describe(v) for v in bad) if bad else None

    def inconclusive_message(self, nodeid: str, verdicts: Sequence[Verdict]) -> str | None:
        """What the stored baselines could not see, and the A/B that would."""
        unsure = [v for v in verdicts if v.kind in ("inconclusive", "incomparable")]
        if not unsure:
            return None
        lines = [f"perfsuite gate: {values.short_name(nodeid)}: could not decide"]
        lines += ["  " + report.describe(v) for v in unsure]
        if nodeid in self.hints:
            lines.append(f"  settle it with: {self.hints[nodeid]}")
        return "\n".join(lines)

    def summary_table(self, decided: Sequence[str] | None = None) -> list[str]:
        """The end-of-run table; ``decided``: what each verdict ended as after the confirmation (report.table)."""
        if not self.verdicts:
            return []
        lines = report.table(self.verdicts, stats.holm_adjusted([v.p_worse for v in self.verdicts]), decided)
        lines.append(f"per-test decisions: Bonferroni, alpha={self.config.alpha:g} over {len(self.family)} gated "
                     f"test(s) that ran with a comparable baseline; p(Holm) is informational; baseline: newest "
                     f"{self.config.baseline_runs} comparable run(s) of {len(self.runs)}")
        span = baseline_span_s(self.config.newest(self.runs))
        if span is not None and span < 3600 and not self.config.min_run_cv:
            lines.append(f"the baseline runs were recorded within {span / 60:.0f} min: their spread cannot show this "
                         "machine's drift over hours; record them over time (e.g. one per nightly) or set "
                         "[tool.perfsuite.gate] min_run_cv (perfsuite calibrate --gap 10m measures it)")
        if self.skipped_contended:
            lines.append(f"{self.skipped_contended} stored run(s) marked contended were left out of the baseline")
        lines += [f"{values.short_name(node)}: {msg} (whatever its timings say, it is not an improvement)"
                  for node, msg in self.changed.items()]
        settled = set()  # tests whose inconclusive screens the confirmation decided: no hint to settle them
        if decided:
            open_ = {v.test for v, d in zip(self.verdicts, decided, strict=True) if d.startswith("inconclusive")}
            settled = {v.test for v in self.verdicts} - open_
        return lines + [f"inconclusive {values.short_name(node)}: settle it with: {hint}"
                        for node, hint in self.hints.items() if node not in settled]
