"""What the pytest plugin calls: :class:`GateSession` (one per pytest session that compares against baselines).

Per-test decisions must be made while the test runs (so the failing test is the regressed one), before the
other p-values exist: each test gets a Bonferroni share ``alpha / family_size`` of the false-alarm budget, split
equally over its statistical metrics (sum over the session = alpha, whatever the split). The summary table adds
Holm-adjusted p-values over the whole session (informational; Holm never contradicts a Bonferroni failure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.gate import load, report, stats
from perfsuite.gate.policy import GateConfig, parse_config
from perfsuite.gate.verdict import Verdict, decide, estimate_cell, run_value


class GateSession:
    def __init__(self, baseline_runs: Sequence[Mapping[str, Any]], policies: GateConfig | Mapping[str, Any] | None =
                 None, family_size: int = 1) -> None:
        self.config = policies if isinstance(policies, GateConfig) else parse_config(policies)
        self.runs = list(baseline_runs)[-self.config.baseline_runs:]
        self.family_size = max(int(family_size), 1)  # the plugin sets it again after collection
        self._by_full, self._by_name = load.index(self.runs)
        self.verdicts: list[Verdict] = []

    def check(self, test_fullname: str, extra_info: Mapping[str, Any], stats_: Mapping[str, Any] | None = None
              ) -> list[Verdict]:
        """Verdicts of one benchmark (its ``extra_info`` as just measured), recorded for :meth:`summary_table`."""
        base = load.match(test_fullname, self._by_full, self._by_name)
        if not base:
            return []
        current = {"extra_info": dict(extra_info), "stats": dict(stats_ or {})}
        cid = str((extra_info.get("cell") or {}).get("id") or "")
        pols = [p for p in self.config.policies_for(cid, load.short_name(test_fullname))
                if run_value(current, p.metric) is not None]  # a policy gates the benchmarks that have its metric
        n_stat = sum(not p.exact for p in pols) or 1
        alpha = self.config.alpha / (max(self.family_size, 1) * n_stat)
        out = [decide(estimate_cell(test_fullname, p, base, [current], self.config), alpha, self.config.power)
               for p in pols]
        self.verdicts.extend(out)
        return out

    @staticmethod
    def failure_message(verdicts: Sequence[Verdict]) -> str | None:
        bad = [v for v in verdicts if v.failed]
        if not bad:
            return None
        return "perfsuite gate: significant regression beyond threshold\n" + "\n".join(
            "  " + v.describe() for v in bad)

    def summary_table(self) -> list[str]:
        if not self.verdicts:
            return []
        ps = [v.p_worse for v in self.verdicts]
        idx = [i for i, p in enumerate(ps) if p is not None]
        adj = stats.holm([ps[i] for i in idx])  # type: ignore[misc]
        holm_p: list[float | None] = [None] * len(ps)
        for i, a in zip(idx, adj, strict=False):
            holm_p[i] = a
        lines = report.table(self.verdicts, holm_p)
        lines.append(f"per-test decisions: Bonferroni, alpha={self.config.alpha:g} over {self.family_size} gated "
                     f"tests; p(Holm) is over the {len(idx)} statistical metrics of this session; "
                     f"baseline: newest {len(self.runs)} run(s)")
        return lines


def make_session(raw: Mapping[str, Any] | GateConfig | None, baseline_runs: Sequence[Mapping[str, Any]],
                 family_size: int = 1) -> GateSession:
    """``raw`` is ``[tool.perfsuite.gate]`` as a mapping (PerfConfig.gate); raises PolicyError when invalid."""
    return GateSession(baseline_runs, raw, family_size)
