"""Latency against throughput per serving configuration, for the HTML report: one curve per (runner class, server
configuration), one marker per load point, from serving cells in pytest-benchmark run files and from
``perfsuite serve`` JSON (``perfsuite-serve/1``, a sweep included)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfsuite.measure.serving.cell import BACKEND

Curve = list[dict[str, float]]  # points: request_throughput, median_ttft_ms, p99_ttft_ms, median_tpot_ms, rate


def _row(m: Mapping[str, Any], rate: Any) -> dict[str, float] | None:
    try:
        return {"request_throughput": float(m["request_throughput"]), "median_ttft_ms": float(m["median_ttft_ms"]),
                "p99_ttft_ms": float(m["p99_ttft_ms"]), "median_tpot_ms": float(m["median_tpot_ms"]),
                "rate": float(rate) if rate is not None else float("nan")}
    except (KeyError, TypeError, ValueError):
        return None


def curves(docs: Iterable[Mapping[str, Any]]) -> dict[str, Curve]:
    out: dict[str, Curve] = {}
    for d in docs:
        if d.get("schema") == "perfsuite-serve/1":
            for p in d.get("points", []):
                row = _row(p.get("metrics", {}), p.get("point", {}).get("load", {}).get("rate"))
                if row:
                    out.setdefault(f"{d.get('base_url')} · {d.get('model')}", []).append(row)
            continue
        rc = (d.get("machine_info") or {}).get("perfsuite", {}).get("runner_class", "")
        for b in d.get("benchmarks", []):
            info = b.get("extra_info") or {}
            cell = info.get("cell") or {}
            if cell.get("backend") != BACKEND or info.get("metric") != "ttft":
                continue
            starts = [p.get("metrics") or {} for p in info.get("processes") or []]
            if not starts:
                continue
            m = {k: sum(float(s.get(k, 0.0)) for s in starts) / len(starts)
                 for k in ("request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms")}
            row = _row(m, (cell.get("point") or {}).get("load", {}).get("rate"))
            pc = "prefix caching" if cell.get("prefix_caching") else "no prefix caching"
            if row:
                out.setdefault(f"{rc} · {cell.get('model')} {cell.get('dtype')} {pc}", []).append(row)
            for p in (info.get("sweep") or {}).get("points") or []:  # a sweep cell: its own curve, up to the stop
                row = _row(p.get("metrics") or {}, (p.get("point") or {}).get("load", {}).get("rate"))
                if row:
                    out.setdefault(f"{rc} · {cell.get('id')} sweep (knee {info['sweep'].get('knee_rate')} req/s)",
                                   []).append(row)
    return {k: sorted(v, key=lambda r: r["request_throughput"]) for k, v in out.items()}


def load_files(paths: Sequence[Path]) -> dict[str, Curve]:
    docs = []
    for p in paths:
        try:
            docs.append(json.loads(Path(p).read_text()))
        except (OSError, ValueError):
            continue
    return curves(docs)


def latency_vs_throughput(name: str, curve: Curve) -> str:
    from perfsuite.orchestrate.report import plots

    fig, (a1, a2) = plots.plt.subplots(1, 2, figsize=(7.2, 2.4))
    x = [r["request_throughput"] for r in curve]
    a1.plot(x, [r["median_ttft_ms"] for r in curve], marker="o", ms=3, color=plots.BLUE, label="median")
    a1.plot(x, [r["p99_ttft_ms"] for r in curve], marker="o", ms=3, color=plots.RED, label="p99")
    a1.set_ylabel("TTFT ms")
    a1.legend(fontsize=7, frameon=False)
    a2.plot(x, [r["median_tpot_ms"] for r in curve], marker="o", ms=3, color=plots.BLUE)
    a2.set_ylabel("median TPOT ms")
    for ax in (a1, a2):
        ax.set_xlabel("requests/s")
        ax.grid(alpha=0.3)
    a1.set_title(name, fontsize=9, loc="left")
    return plots._svg(fig)
