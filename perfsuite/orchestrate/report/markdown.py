"""The markdown summary: short enough for ``$GITHUB_STEP_SUMMARY`` and a PR comment (GitHub caps both at 1 MiB;
we stay far below by listing what needs attention first and cutting long tables)."""

from __future__ import annotations

from perfsuite.orchestrate.report.data import ReportData, latest_cells, pct_cell

MAX_ROWS = 40


def _cut(rows: list[str], total: int, what: str) -> None:
    if total > MAX_ROWS:
        rows.append(f"\n… {total - MAX_ROWS} more {what} in report.html")


def render(d: ReportData) -> str:
    out = [f"# {d.title}", ""]
    regressions = [f for f in d.new_findings if f.kind == "regression"]
    ab_bad = [a for a in d.ab if a.get("verdict") == "regression"]
    head = []
    if regressions:
        head.append(f"**{len(regressions)} new change point(s) toward slower** in the last {d.new_within} run(s)")
    if ab_bad:
        head.append(f"**A/B: {len(ab_bad)} regression verdict(s)**")
    new_gaps = [o for o in d.ops_delta if o["change"] == "new gap"]
    if new_gaps:
        head.append(f"**{len(new_gaps)} new operator gap(s)**")
    out.append(" · ".join(head) if head else "No new regression: no new change point toward slower, no A/B "
               "regression, no new operator gap.")
    out += ["", f"History: {d.runs_in_db} run(s) in `{d.db_path}`." if d.db_path else "History: none given.", ""]

    if d.ab:
        out += ["## A/B verdicts", "", "| test | metric | verdict | change | interval |", "|---|---|---|---|---|"]
        for a in d.ab[:MAX_ROWS]:
            p = a.get("payload", {})
            ratio = a.get("ratio")
            lo, hi = p.get("ci_low"), p.get("ci_high")
            ci = f"{lo - 1:+.1%} … {hi - 1:+.1%}" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else "—"
            v = str(a.get("verdict") or "—")
            out.append(f"| `{a.get('test')}` | {a.get('metric')} | {'**' + v + '**' if v == 'regression' else v} | "
                       f"{pct_cell(ratio - 1 if isinstance(ratio, (int, float)) else None)} | {ci} |")
        _cut(out, len(d.ab), "verdicts")
        out.append("")

    out += ["## Change points", ""]
    if d.findings:
        out += ["E-divisive means, permutation test (docs/history.md). Newest first; *new* = within the last "
                f"{d.new_within} run(s).", "",
                "| series | change | p | commits | runs since | confirm with |", "|---|---|---|---|---|---|"]
        rows = sorted(d.findings, key=lambda f: (f.since, f.key))
        for f in rows[:MAX_ROWS]:
            new = " *new*" if f.since <= d.new_within else ""
            cmd = f.ab_commands()
            confirm = f"`{cmd[1]}`" if cmd else "—"
            out.append(f"| {f.key.runner_class} `{f.key.cell_id}` {f.key.metric}:{f.key.name} | "
                       f"{'**' if f.kind == 'regression' else ''}{pct_cell(f.change.change)} {f.kind}"
                       f"{'**' if f.kind == 'regression' else ''}{new} | {f.change.p_value:.3g} | "
                       f"`{f.commit_range()}` | {f.since} | {confirm} |")
        _cut(out, len(rows), "change points")
    else:
        out.append("None found.")
    for n in d.notes[:MAX_ROWS]:
        out.append(f"- {n}")
    out.append("")

    if d.latest:
        out += ["## Latest run: latency and efficiency", "",
                "Δ = against the median of the previous (up to 10) runs of the same series: an indication; the "
                "change points and A/B above decide.", "",
                "| runner class | cell | TTFT p50 ms | Δ | TPOT p50 ms | Δ | tokens/s | peak MiB | tokens/s per GiB |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in d.latest[:MAX_ROWS]:
            out.append(f"| {r['runner_class']} | `{r['cell_id']}` | {' | '.join(latest_cells(r))} |")
        _cut(out, len(d.latest), "cells")
        out.append("")

    if d.ops is not None:
        cells = d.ops.get("cells", [])
        bad = sum(1 for c in cells if c.get("worst") != "pass")
        out += ["## Operator coverage", "", f"{len(cells)} cells, {bad} not passing "
                f"({d.ops.get('meta', {}).get('runner_class', '?')}).", ""]
        if d.ops_delta:
            out += ["| change | op | shape class | backend | dtype | detail |", "|---|---|---|---|---|---|"]
            for o in d.ops_delta[:MAX_ROWS]:
                out.append(f"| {o['change']} | {o['op']} | {o['shape_class']} | {o['backend']} | {o['dtype']} | "
                           f"{o['detail'].replace('|', '/')[:120]} |")
            _cut(out, len(d.ops_delta), "changes")
        else:
            out.append("No change.")
        out.append("")
    out.append(f"<sub>perfsuite report, {d.generated_at}</sub>")
    return "\n".join(out) + "\n"
