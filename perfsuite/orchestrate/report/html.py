"""The static HTML report: one self-contained file (inline CSS and SVG; no script, no network)."""

from __future__ import annotations

from html import escape

from perfsuite.orchestrate.report import plots
from perfsuite.orchestrate.report.data import ReportData, latest_cells, pct_cell

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1100px;color:#1f2328;
padding:0 16px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #d0d7de;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}code{font-size:12px;background:#f6f8fa;padding:1px 3px}
.bad{color:#c0392b;font-weight:600}.good{color:#1e8449}.muted{color:#656d76}.plot svg{max-width:100%;height:auto}
.banner{padding:10px 14px;border-radius:6px;background:#f6f8fa;border:1px solid #d0d7de}
.banner.bad{background:#fdecea;border-color:#f5c2c0}
"""


def _table(head: list[str], rows: list[list[str]]) -> str:
    h = "".join(f"<th>{escape(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def render(d: ReportData) -> str:
    parts: list[str] = []
    regressions = [f for f in d.new_findings if f.kind == "regression"]
    ab_bad = [a for a in d.ab if a.get("verdict") == "regression"]
    bad = bool(regressions or ab_bad or any(o["change"] == "new gap" for o in d.ops_delta))
    msg = (f"{len(regressions)} new change point(s) toward slower; {len(ab_bad)} A/B regression verdict(s)"
           if bad else "No new regression.")
    parts.append(f'<p class="banner{" bad" if bad else ""}" id="summary">{escape(msg)} '
                 f'<span class="muted">History: {d.runs_in_db} run(s) in <code>{escape(str(d.db_path))}</code>; '
                 f"generated {escape(d.generated_at)}.</span></p>")

    parts.append('<h2 id="changes">Change points</h2>')
    if d.findings:
        rows = []
        for f in sorted(d.findings, key=lambda f: (f.since, f.key)):
            cls = "bad" if f.kind == "regression" else "good"
            cmd = f.ab_commands()
            rows.append([f"{escape(f.key.runner_class)}<br><code>{escape(f.key.cell_id)}</code> "
                         f"{escape(f.key.metric)}:{escape(f.key.name)}",
                         f'<span class="{cls}">{pct_cell(f.change.change)} {f.kind}</span>'
                         + (" <b>new</b>" if f.since <= d.new_within else ""),
                         f"{f.change.p_value:.3g}", f"<code>{escape(f.commit_range())}</code>", str(f.since),
                         "<br>".join(f"<code>{escape(c)}</code>" for c in cmd) or "—"])
        parts.append(_table(["series", "change", "p", "commits", "runs since", "confirm with"], rows))
    else:
        parts.append("<p>None found.</p>")
    if d.notes:
        parts.append("<ul>" + "".join(f'<li class="muted">{escape(n)}</li>' for n in d.notes[:50]) + "</ul>")

    if d.ab:
        parts.append('<h2 id="ab">A/B verdicts</h2>')
        if d.ab_sources:
            parts.append(f'<p class="muted">From {escape(", ".join(d.ab_sources))}.</p>')
        svg = plots.ab(d.ab)
        if svg:
            parts.append(f'<div class="plot">{svg}</div>')
        rows = []
        for a in d.ab:
            v = str(a.get("verdict") or "—")
            ratio = a.get("ratio")
            rows.append([f"<code>{escape(str(a.get('test')))}</code>", escape(str(a.get("metric"))),
                         f'<span class="{"bad" if v == "regression" else ""}">{escape(v)}</span>',
                         pct_cell(ratio - 1 if isinstance(ratio, (int, float)) else None),
                         escape(str(a.get("payload", {}).get("note", "")))])
        parts.append(_table(["test", "metric", "verdict", "change", "note"], rows))

    if d.series:
        parts.append('<h2 id="history">History per cell</h2><p class="muted">Each point is one run; dashed lines '
                     "mark change points (red: slower, green: faster), grey bars the segment medians.</p>")
        for s in d.series:
            changes = [(f.change.index, f.change.before, f.change.after, f.kind == "regression") for f in s.findings]
            labels = [p.run_time[5:10] + (f"\n{p.commit_id[:7]}" if p.commit_id else "") for p in s.points]
            unit = "ms" if s.key.name.endswith("_ms") else s.key.name.rsplit("_", 1)[-1]
            svg = plots.series([p.value for p in s.points], labels, changes,
                               f"{s.key.runner_class} · {s.key.cell_id} · {s.key.metric}:{s.key.name}", unit)
            parts.append(f'<div class="plot">{svg}</div>')

    if d.latest:
        parts.append('<h2 id="latest">Latest run: latency and efficiency</h2><p class="muted">Δ against the median '
                     "of the previous (up to 10) runs of the same series.</p>")
        rows = [[escape(r["runner_class"]), f"<code>{escape(r['cell_id'])}</code>", *latest_cells(r)] for r in d.latest]
        parts.append(_table(["runner class", "cell", "TTFT p50 ms", "Δ", "TPOT p50 ms", "Δ", "tokens/s", "peak MiB",
                             "tokens/s per GiB"], rows))

    if d.serving:
        from perfsuite.orchestrate.report.serving_plot import latency_vs_throughput

        parts.append('<h2 id="serving">Serving: latency against throughput</h2><p class="muted">One marker per load '
                     "point of the latest runs (docs/serving.md).</p>")
        parts += [f'<div class="plot">{latency_vs_throughput(k, c)}</div>' for k, c in d.serving.items()]

    if d.ops is not None:
        parts.append('<h2 id="ops">Operator coverage</h2>')
        svg = plots.ops_matrix(d.ops)
        if svg:
            parts.append(f'<div class="plot">{svg}</div>')
        if d.ops_delta:
            parts.append(_table(["change", "op", "shape class", "backend", "dtype", "detail"],
                                [[escape(str(o[k])) for k in ("change", "op", "shape_class", "backend", "dtype",
                                                              "detail")] for o in d.ops_delta]))
        else:
            parts.append("<p>No change against the known gaps or the previous matrix.</p>")

    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(d.title)}</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><style>{CSS}</style></head>\n'
            f"<body><h1>{escape(d.title)}</h1>\n{body}\n</body></html>\n")
