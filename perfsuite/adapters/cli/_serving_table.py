"""``perfsuite run``'s rows for serving cells: the vLLM-named medians (``median_{ttft,tpot,itl,e2el}_ms``) and the
throughputs (``request_throughput``, ``request_goodput``) of every serving cell, one row per cell, with the change
of median TTFT and TPOT against the latest baseline run (an indication: the gate decides), and the knee of a sweep
cell. The engine cells keep their own table (perfsuite.adapters.cli.run.table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfsuite.facts.vocabulary import LATENCIES, num_cell
from perfsuite.measure.serving.cell import BACKEND

COLUMNS = ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "median_e2el_ms", "request_throughput",
           "request_goodput")


def by_cell(data: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Serving cells of a pytest-benchmark run: cell id -> metric (ttft, tpot, itl, e2el) -> benchmark."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info") or {}
        cell = info.get("cell") or {}
        if cell.get("backend") == BACKEND and info.get("metric") in LATENCIES:
            out.setdefault(str(cell.get("id")), {})[info["metric"]] = b
    return out


def _change(cur: Mapping[str, Any] | None, base: Mapping[str, Any] | None, metric: str) -> str:
    a = ((cur or {}).get("extra_info") or {}).get(f"median_{metric}_ms")
    b = ((base or {}).get("extra_info") or {}).get(f"median_{metric}_ms")
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return "—"
    return f"{a / b - 1:+.1%}"


def rows(current: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> list[str]:
    """The serving table (no lines when the run has no serving cell). Throughputs and goodput are per server start
    averaged (extra_info); goodput is "—" when the profile sets no SLO (``goodput``)."""
    cur, old = by_cell(current), by_cell(base or {})
    if not cur:
        return []
    head = (f"{'serving cell':<64} " + " ".join(f"{c:>{max(len(c), 9)}}" for c in COLUMNS)
            + f" {'Δmedian_ttft':>12} {'Δmedian_tpot':>12}")
    out = [head, "-" * len(head)]
    knees = []
    for cid, tests in cur.items():
        vals = [((tests.get(m) or {}).get("extra_info") or {}).get(f"median_{m}_ms") for m in LATENCIES]
        info = next(((tests[m].get("extra_info") or {}) for m in LATENCIES if m in tests), {})
        vals += [info.get("request_throughput"), info.get("request_goodput")]
        o = old.get(cid, {})
        out.append(f"{cid:<64} " + " ".join(f"{num_cell(v, '.3f'):>{max(len(c), 9)}}"
                                            for c, v in zip(COLUMNS, vals, strict=True))
                   + "".join(f" {_change(tests.get(m), o.get(m), m):>12}" for m in ("ttft", "tpot")))
        sw = info.get("sweep")
        if isinstance(sw, Mapping):
            knees.append(f"  {cid}: sweep {', '.join(f'{r:g}' for r in sw.get('rates', []))} req/s; knee "
                         + (f"{sw['knee_rate']:g} req/s "
                            f"({num_cell((sw.get('knee') or {}).get('request_throughput'), '.3f')} req/s achieved)"
                            if sw.get("knee_rate") is not None else "none")
                         + f"; stopped {sw.get('stopped')}")
    return out + (["knee of each sweep (the highest load the server sustained; per start in extra_info):", *knees]
                  if knees else [])
