"""A rate sweep to saturation: open-loop points at rising rates until the server stops keeping up, with the knee.

Stop rules, checked after each point: failed requests over the threshold; the SLO broke (goodput under
``SLO_FRACTION`` of the throughput); the achieved request throughput fell under ``KEEP_UP`` of the offered rate; or it
rose by less than ``MIN_GAIN`` over the previous point. The knee is the last point before the stop that passed
every rule (None when the first point already failed one): the highest load the server sustains.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

KEEP_UP, MIN_GAIN, SLO_FRACTION = 0.9, 0.05, 0.9


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        rates = []
    if not rates or any(r <= 0 for r in rates) or rates != sorted(set(rates)):
        raise ValueError(f"--sweep {text!r}: write rising request rates, e.g. 1,2,4,8")
    return rates


def saturated(m: Mapping[str, Any], rate: float, prev: Mapping[str, Any] | None) -> str | None:
    thr = float(m["request_throughput"])
    if "request_goodput" in m and m["request_goodput"] < SLO_FRACTION * thr:
        return f"SLO broke: goodput {m['request_goodput']:.2f} of {thr:.2f} req/s"
    if thr < KEEP_UP * rate:
        return f"throughput {thr:.2f} req/s fell behind the offered {rate:g} req/s"
    if prev is not None and thr < (1 + MIN_GAIN) * float(prev["request_throughput"]):
        return f"throughput no longer rises ({float(prev['request_throughput']):.2f} -> {thr:.2f} req/s)"
    return None


def sweep(run: Callable[[float], dict[str, Any]], rates: Sequence[float]) -> dict[str, Any]:
    """``run(rate)`` runs one point (a :func:`perfsuite.measure.serving.point.run_point` result)."""
    points: list[dict[str, Any]] = []
    knee: dict[str, Any] | None = None
    stopped = "all rates kept up"
    for rate in rates:
        r = run(rate)
        points.append(r)
        why = r["failure"] or saturated(r["metrics"], rate, points[-2]["metrics"] if len(points) > 1 else None)
        if why:
            stopped = f"at {rate:g} req/s: {why}"
            break
        knee = r
    return {"rates": list(rates), "stopped": stopped, "knee_rate": knee["point"]["load"]["rate"] if knee else None,
            "knee": ({k: knee["metrics"][k] for k in ("request_throughput", "output_throughput", "median_ttft_ms",
                                                      "median_tpot_ms", "p99_ttft_ms", "p99_tpot_ms")}
                     if knee else None), "points": points}


def sweep_cell_point(run: Callable[[Any], dict[str, Any]], point: Any) -> dict[str, Any]:
    """A serving cell's sweep point (``sweep = [rates]`` in its table): the point's own load first, then each sweep
    rate until saturation. Returns the first point's result (what the cell's tests record and the gate compares:
    a fixed load, the same every run) with ``sweep``: the rates, where it stopped, the knee and every point's
    metrics (records dropped: the fixed point keeps its own). The first point failing fails the cell; a later one
    failing is saturation."""
    sw = sweep(lambda rate: run(replace(point, load=replace(point.load, rate=rate), sweep=())),
               [point.load.rate, *point.sweep])
    first = sw["points"][0]
    sw["points"] = [{k: p[k] for k in ("point", "metrics", "failure")} for p in sw["points"]]
    return {**first, "sweep": sw}
