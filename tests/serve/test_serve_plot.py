"""The report's latency-vs-throughput plot of serving points (pytest runs and `perfsuite serve` JSON)."""

from __future__ import annotations

import json
from pathlib import Path

from perfsuite.orchestrate.report import serving_plot as plot

RUN = Path(__file__).parent / "data" / "serving_run.json"


def _serve_doc(rates):
    pts = [{"point": {"load": {"rate": r}}, "metrics": {"request_throughput": r * 0.98, "median_ttft_ms": 10 + r,
                                                       "p99_ttft_ms": 20 + 2 * r, "median_tpot_ms": 1.0}}
           for r in rates]
    return {"schema": "perfsuite-serve/1", "base_url": "http://127.0.0.1:8000", "model": "m", "points": pts}


def test_curves_from_pytest_runs_and_serve_json(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(_serve_doc([4, 1, 2])))
    c = plot.load_files([RUN, tmp_path / "s.json", tmp_path / "missing.json"])
    serving = next(v for k, v in c.items() if "tiny-llama" in k)
    assert len(serving) == 1 and serving[0]["rate"] == 4.0  # one entry per point (the TTFT test's)
    mine = c["http://127.0.0.1:8000 · m"]
    assert [r["rate"] for r in mine] == [1, 2, 4]  # sorted by throughput


def test_report_html_has_the_plot(tmp_path):
    from perfsuite.orchestrate.report import collect, html

    text = html.render(collect(None, runs=[RUN], ab=[], ops=None, ops_previous=None, title="t"))
    assert "Serving: latency against throughput" in text and "requests/s" in text
