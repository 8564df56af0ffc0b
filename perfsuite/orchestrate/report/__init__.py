"""Reports people look at (docs/report.md): ``write(data, out_dir)`` writes ``summary.md`` (for
``$GITHUB_STEP_SUMMARY`` and PR comments), ``report.html`` (static, with plots) and ``report.json``. Plotting needs
matplotlib (the ``report`` extra); it is imported only when the HTML is rendered."""

from __future__ import annotations

import json
from pathlib import Path

from perfsuite.orchestrate.report.data import ReportData, collect

__all__ = ["ReportData", "collect", "write"]


def write(data: ReportData, out_dir: Path) -> dict[str, Path]:
    from perfsuite.orchestrate.report import html, markdown

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "summary.md", "html": out_dir / "report.html", "json": out_dir / "report.json"}
    paths["markdown"].write_text(markdown.render(data), encoding="utf8")
    paths["html"].write_text(html.render(data), encoding="utf8")
    paths["json"].write_text(json.dumps(data.as_dict(), indent=1, default=str), encoding="utf8")
    return paths
