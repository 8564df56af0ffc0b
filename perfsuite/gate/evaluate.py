"""Offline evaluation of the gate on a corpus of process runs (A/A runs, runs with an injected slowdown).

Used by ``perfsuite calibrate`` and benchmarks/gate_eval.py. The injected fraction of a run is read from the
run itself (``extra_info.backend_info.injected_decode_slowdown``; 0 when absent), so a corpus is self-describing.

Protocol (each comparison = what one CI job would decide):
* gate, A/A: every A/A run in turn is "current"; its baseline is ``baseline_runs`` *other* A/A runs, drawn at
  random ``draws`` times. A false alarm = any metric of the run's gated family is a regression (Holm).
* gate, detection: every injected run is "current" against ``draws`` random baselines of A/A runs; detected =
  the metric regressed.
* pytest-benchmark ``median:5%``: current run vs ONE baseline run (what ``--benchmark-compare`` loads); fails
  when ``stats.median`` of any benchmark (false alarms) / of the benchmark (detection) grew by more than 5 %.
  Evaluated over every ordered pair of distinct runs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfsuite.gate import load, stats
from perfsuite.gate.compare import compare_runs
from perfsuite.gate.policy import GateConfig
from perfsuite.gate.verdict import run_value


def injected(run: Mapping[str, Any]) -> float:
    for b in run.get("benchmarks", []):
        v = ((b.get("extra_info") or {}).get("backend_info") or {}).get("injected_decode_slowdown")
        if v:
            return float(v)
    return 0.0


@dataclass
class Rate:
    k: int = 0
    n: int = 0

    def add(self, hit: bool) -> None:
        self.k += int(hit)
        self.n += 1

    def __str__(self) -> str:
        if not self.n:
            return "n/a"
        lo, hi = stats.binomial_interval(self.k, self.n)
        return f"{self.k}/{self.n} = {100 * self.k / self.n:.1f}% (95% CI {100 * lo:.1f}-{100 * hi:.1f}%)"


@dataclass
class Evaluation:
    groups: dict[float, int]
    gate_false_alarm: Rate = field(default_factory=Rate)
    gate_false_alarm_by_metric: dict[str, Rate] = field(default_factory=dict)
    gate_detect: dict[tuple[float, str], Rate] = field(default_factory=dict)
    gate_inconclusive: dict[tuple[float, str], Rate] = field(default_factory=dict)
    gate_mde: dict[str, list[float]] = field(default_factory=dict)
    pb_false_alarm: Rate = field(default_factory=Rate)
    pb_false_alarm_by_test: dict[str, Rate] = field(default_factory=dict)
    pb_detect: dict[tuple[float, str], Rate] = field(default_factory=dict)
    between_run_cv: dict[str, float] = field(default_factory=dict)
    true_effect: dict[tuple[float, str], float] = field(default_factory=dict)
    plan: list[str] = field(default_factory=list)
    plan_note: str = ""

    def lines(self) -> list[str]:
        out = [f"corpus: {', '.join(f'{n} runs at injection {f:g}' for f, n in sorted(self.groups.items()))}"]
        out.append("between-run CV (SD of log run value over A/A runs; median over tests) and observed injected "
                   "effect (ratio of geometric means vs A/A):")
        for m, cv in self.between_run_cv.items():
            eff = ", ".join(f"inj {f:g}: {100 * e:+.1f}%" for (f, mm), e in sorted(self.true_effect.items())
                            if mm == m)
            mde = self.gate_mde.get(m)
            out.append(f"  {m:28s} cv {100 * cv:5.2f}%   {eff}"
                       + (f"   gate MDE median {100 * float(np.median(mde)):.1f}%" if mde else ""))
        if self.plan:
            out.append(f"planned MDE at the measured between-run CV ({self.plan_note}):")
            out.extend("  " + line for line in self.plan)
        out.append(f"gate  A/A false alarms (any gated metric, Holm): {self.gate_false_alarm}")
        for m, r in self.gate_false_alarm_by_metric.items():
            out.append(f"      A/A false alarms {m:28s}: {r}")
        for (f, m), r in sorted(self.gate_detect.items()):
            out.append(f"gate  detection inj {f:g} {m:28s}: {r}; inconclusive {self.gate_inconclusive[(f, m)]}")
        out.append(f"pytest-benchmark median:5% A/A false alarms (any test): {self.pb_false_alarm}")
        for t, r in self.pb_false_alarm_by_test.items():
            out.append(f"      A/A false alarms {t:28s}: {r}")
        for (f, t), r in sorted(self.pb_detect.items()):
            out.append(f"pytest-benchmark median:5% detection inj {f:g} {t:28s}: {r}")
        return out


def _test_of(name: str) -> str:
    return load.short_name(name).split("[")[0]


def evaluate(runs: Sequence[Mapping[str, Any]], config: GateConfig, *, draws: int = 5, seed: int = 0,
             detect_metrics: Sequence[str] | None = None, pb_threshold: float = 0.05) -> Evaluation:
    rng = random.Random(seed)
    by_inj: dict[float, list[Mapping[str, Any]]] = {}
    for r in runs:
        by_inj.setdefault(injected(r), []).append(r)
    aa = by_inj.get(0.0, [])
    ev = Evaluation({f: len(v) for f, v in by_inj.items()})
    r_base = min(config.baseline_runs, len(aa) - 1)
    if r_base < 2:
        raise ValueError(f"need >= 3 A/A runs for an evaluation, have {len(aa)}")
    stat_metrics = [p.metric for p in config.policies if not p.exact]
    detect_metrics = list(detect_metrics or stat_metrics)

    # noise and effect sizes, per (test, metric) with the metric present
    names = sorted({b["fullname"] for r in aa for b in r["benchmarks"]})
    for m in stat_metrics:
        cvs = []
        for n in names:
            vals: list[Any] = [run_value(b, m) for r in aa for b in r["benchmarks"] if b["fullname"] == n]
            vals = [v for v in vals if v is not None and v > 0]
            if len(vals) >= 3:
                cvs.append(float(np.std(np.log(vals), ddof=1)))
                for f, group in by_inj.items():
                    if f == 0.0:
                        continue
                    iv: list[Any] = [run_value(b, m) for r in group for b in r["benchmarks"] if b["fullname"] == n]
                    iv = [v for v in iv if v is not None and v > 0]
                    if iv and _test_of(n) == "test_tpot":
                        ev.true_effect[(f, m)] = math.exp(np.mean(np.log(iv)) - np.mean(np.log(vals))) - 1
        if cvs:
            ev.between_run_cv[m] = math.expm1(float(np.median(cvs)))

    # what designs would reach at this noise (per-metric alpha: Bonferroni share of the family)
    m_stat = max(len(stat_metrics), 1)
    a1 = config.alpha / m_stat
    ev.plan_note = f"alpha {a1:.2g} per metric (= {config.alpha:g}/{m_stat}), power 90 %"
    for m, cv in ev.between_run_cv.items():
        pol = next(p for p in config.policies if p.metric == m)
        s_u, thr = math.log1p(cv), math.log1p(pol.threshold)
        cells = []
        for label, kw in (("R=5,C=1", {"baseline_runs": 5}), ("R=10,C=1", {"baseline_runs": 10}),
                          ("R=10,C=3", {"baseline_runs": 10, "current_runs": 3}), ("A/B k=6", {"pairs": 6}),
                          ("A/B k=10", {"pairs": 10})):
            cells.append(f"{label}: {100 * math.expm1(stats.planned_mde(s_u, a1, 0.9, thr, **kw)):.1f}%")
        ev.plan.append(f"{m:28s} " + "  ".join(cells))

    # the gate, A/A
    for i, cur in enumerate(aa):
        others = aa[:i] + aa[i + 1:]
        for _ in range(draws):
            base = rng.sample(others, r_base)
            vs = compare_runs(base, [cur], config)
            ev.gate_false_alarm.add(any(v.failed for v in vs))
            for v in vs:
                if not v.exact:
                    key = f"{_test_of(v.test)}:{v.metric}"
                    ev.gate_false_alarm_by_metric.setdefault(key, Rate()).add(v.failed)
                    if v.mde is not None and _test_of(v.test) == "test_tpot":
                        ev.gate_mde.setdefault(v.metric, []).append(v.mde)
    # the gate, detection (decode slowdown: TPOT of test_tpot)
    for f, group in sorted(by_inj.items()):
        if f == 0.0:
            continue
        for cur in group:
            for _ in range(draws):
                base = rng.sample(aa, r_base)
                vs = compare_runs(base, [cur], config)
                for v in vs:
                    if v.metric in detect_metrics and _test_of(v.test) == "test_tpot":
                        ev.gate_detect.setdefault((f, v.metric), Rate()).add(v.failed)
                        ev.gate_inconclusive.setdefault((f, v.metric), Rate()).add(v.kind == "inconclusive")

    # pytest-benchmark --benchmark-compare-fail=median:5%
    def pb_fails(base: Mapping[str, Any], cur: Mapping[str, Any]) -> dict[str, bool]:
        bf, bn = load.index([base])
        out = {}
        for b in cur["benchmarks"]:
            ref = load.match(b["fullname"], bf, bn)
            if ref:
                out[_test_of(b["fullname"])] = b["stats"]["median"] / ref[0]["stats"]["median"] - 1 > pb_threshold
        return out

    for i, cur_run in enumerate(aa):
        for j, base_run in enumerate(aa):
            if i != j:
                res = pb_fails(base_run, cur_run)
                ev.pb_false_alarm.add(any(res.values()))
                for t, hit in res.items():
                    ev.pb_false_alarm_by_test.setdefault(t, Rate()).add(hit)
    for f, group in sorted(by_inj.items()):
        if f == 0.0:
            continue
        for cur_run in group:
            for base_run in aa:
                res = pb_fails(base_run, cur_run)
                if "test_tpot" in res:
                    ev.pb_detect.setdefault((f, "test_tpot stats.median"), Rate()).add(res["test_tpot"])
    return ev
