"""Whole-run comparisons for ``perfsuite compare``: baseline runs vs current run(s), Holm over every gated
metric of every benchmark the two share."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from perfsuite.verdict import values
from perfsuite.verdict.decide import Verdict, decide_all
from perfsuite.verdict.estimate import Comparison, estimate
from perfsuite.verdict.policy import GateConfig


def index(runs: Iterable[Mapping[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """(by fullname, by name) -> benchmark entries, one per run that has it, in run order."""
    by_full: dict[str, list[dict[str, Any]]] = {}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for b in run.get("benchmarks", []):
            if run.get("_path"):  # the file it came from, named when the gate leaves it out (estimate)
                b = {**b, "_path": run["_path"]}
            by_full.setdefault(b["fullname"], []).append(b)
            by_name.setdefault(b.get("name") or values.short_name(b["fullname"]), []).append(b)
    return by_full, by_name


def match(fullname: str, by_full: Mapping[str, list[dict[str, Any]]],
          by_name: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Baseline entries of one benchmark: by pytest-benchmark ``fullname``, else by ``name``."""
    return list(by_full.get(fullname) or by_name.get(values.short_name(fullname)) or [])


def _names(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The benchmarks' fullnames, each once, in order of first appearance."""
    return list(dict.fromkeys(b["fullname"] for r in runs for b in r.get("benchmarks", [])))


def compare_runs(baseline_runs: Sequence[Mapping[str, Any]], current_runs: Sequence[Mapping[str, Any]],
                 config: GateConfig, correction: str = "holm") -> list[Verdict]:
    """Every benchmark of the current run(s) that the baseline has, every policy that applies to it."""
    b_full, b_name = index(baseline_runs)
    c_full, _ = index(current_runs)
    comps: list[Comparison] = []
    for name in _names(current_runs):
        base = match(name, b_full, b_name)
        if not base:
            continue
        cur = c_full[name]
        comps += [estimate(name, pol, base, cur, config)
                  for pol in config.policies_for(values.cell_id(cur[-1]), values.short_name(name))
                  if values.run_value(cur[-1], pol.metric) is not None]
    return decide_all(comps, config.alpha, config.power, correction)


def unmatched(baseline_runs: Sequence[Mapping[str, Any]], current_runs: Sequence[Mapping[str, Any]]) -> list[str]:
    b_full, b_name = index(baseline_runs)
    return [n for n in _names(current_runs) if not match(n, b_full, b_name)]
