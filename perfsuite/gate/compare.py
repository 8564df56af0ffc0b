"""Whole-run comparisons for the CLI: baseline runs vs current runs (Holm over all gated metrics), and paired
A/B runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.gate import load
from perfsuite.gate.policy import GateConfig
from perfsuite.gate.verdict import Cell, Verdict, decide_family, estimate_cell, run_value


def _names(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in runs:
        for b in r.get("benchmarks", []):
            seen.setdefault(b["fullname"], None)
    return list(seen)


def compare_runs(baseline_runs: Sequence[Mapping[str, Any]], current_runs: Sequence[Mapping[str, Any]],
                 config: GateConfig, correction: str = "holm") -> list[Verdict]:
    """Every benchmark of the current run(s) that the baseline has, every policy that applies to it."""
    base = list(baseline_runs)[-config.baseline_runs:]
    b_full, b_name = load.index(base)
    c_full, _c_name = load.index(current_runs)
    cells: list[Cell] = []
    for name in _names(current_runs):
        bb = load.match(name, b_full, b_name)
        if not bb:
            continue
        cc = c_full[name]
        for pol in config.policies_for(load.cell_id(cc[-1]), load.short_name(name)):
            if run_value(cc[-1], pol.metric) is None:
                continue
            cells.append(estimate_cell(name, pol, bb, cc, config))
    return decide_family(cells, config.alpha, config.power, correction)


def unmatched(baseline_runs: Sequence[Mapping[str, Any]], current_runs: Sequence[Mapping[str, Any]]) -> list[str]:
    b_full, b_name = load.index(baseline_runs)
    return [n for n in _names(current_runs) if not load.match(n, b_full, b_name)]


def compare_paired(a_runs: Sequence[Mapping[str, Any]], b_runs: Sequence[Mapping[str, Any]], config: GateConfig,
                   correction: str = "holm") -> list[Verdict]:
    """``a_runs[i]`` and ``b_runs[i]`` ran back to back (pair i); B is the candidate, A the reference."""
    if len(a_runs) != len(b_runs):
        raise ValueError("paired comparison needs as many A runs as B runs")
    cells: list[Cell] = []
    for name in _names(b_runs):
        pairs = []
        for a, b in zip(a_runs, b_runs, strict=False):
            af, an = load.index([a])
            ea = load.match(name, af, an)
            eb = [x for x in b.get("benchmarks", []) if x["fullname"] == name]
            if ea and eb:
                pairs.append((ea[0], eb[0]))
        if len(pairs) < 2:
            continue
        for pol in config.policies_for(load.cell_id(pairs[-1][1]), load.short_name(name)):
            if run_value(pairs[-1][1], pol.metric) is None:
                continue
            if pol.exact:
                cells.append(estimate_cell(name, pol, [p[0] for p in pairs], [p[1] for p in pairs], config))
            else:
                cells.append(estimate_cell(name, pol, [p[0] for p in pairs], [p[1] for p in pairs], config,
                                           paired=True))
    return decide_family(cells, config.alpha, config.power, correction)
