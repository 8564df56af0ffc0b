"""Cross-check against the server's own Prometheus ``/metrics``: the change of vLLM's latency histograms over one
load point (snapshots before and after, both after the warm-up), its mean (sum/count: exact) and median
(interpolated inside its bucket), beside the client's figures. Why they differ: docs/serving.md (the server's TTFT
runs from its front end to its output processor; the client's adds HTTP, JSON and the loopback both ways).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfsuite.measure.serving.server import http_get

# client metric -> the server's histogram (vLLM's names)
HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
              "tpot": "vllm:request_time_per_output_token_seconds", "e2el": "vllm:e2e_request_latency_seconds"}


@dataclass(frozen=True)
class Hist:
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending
    total: float
    count: float

    def minus(self, other: Hist) -> Hist:
        prev = dict(other.buckets)
        return Hist(tuple((le, c - prev.get(le, 0.0)) for le, c in self.buckets), self.total - other.total,
                    self.count - other.count)

    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """Prometheus' histogram_quantile: linear inside the bucket."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lo, below = 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank:
                if le == float("inf"):
                    return lo
                return lo + (le - lo) * ((rank - below) / (c - below) if c > below else 0.0)
            lo, below = le, c
        return lo


def parse(text: str, names: Mapping[str, str] = HISTOGRAMS) -> dict[str, Hist]:
    """Histograms by our short name, summed over label sets (engines, models)."""
    from prometheus_client.parser import text_string_to_metric_families

    want = {v: k for k, v in names.items()}
    acc: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        short = want.get(fam.name)
        if short is None or fam.type != "histogram":
            continue
        a = acc.setdefault(short, {"b": {}, "sum": 0.0, "count": 0.0})
        for s in fam.samples:
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])
                a["b"][le] = a["b"].get(le, 0.0) + s.value
            elif s.name.endswith("_sum"):
                a["sum"] += s.value
            elif s.name.endswith("_count"):
                a["count"] += s.value
    return {k: Hist(tuple(sorted(a["b"].items())), a["sum"], a["count"]) for k, a in acc.items()}


def snapshot(base_url: str) -> dict[str, Hist] | None:
    """None when the server has no Prometheus endpoint (not every OpenAI-compatible server does)."""
    try:
        status, text = http_get(base_url.rstrip("/") + "/metrics", timeout_s=5.0)
    except OSError:
        return None
    try:
        return parse(text) if status == 200 else None
    except (ValueError, ImportError):
        return None


def compare(before: Mapping[str, Hist] | None, after: Mapping[str, Hist] | None,
            client: Mapping[str, Any]) -> dict[str, Any]:
    """Server vs client per metric: requests seen, mean and median (ms), the relative difference of each."""
    if before is None or after is None:
        return {"available": False}
    out: dict[str, Any] = {"available": True}
    for short, h in after.items():
        d = h.minus(before[short]) if short in before else h
        mean, med = d.mean(), d.quantile(0.5)
        row: dict[str, Any] = {"histogram": HISTOGRAMS[short], "count": d.count,
                               "server_mean_ms": mean * 1e3 if mean is not None else None,
                               "server_median_ms": med * 1e3 if med is not None else None}
        for stat in ("mean", "median"):
            c, s = client.get(f"{stat}_{short}_ms"), row[f"server_{stat}_ms"]
            row[f"client_{stat}_ms"] = c
            row[f"{stat}_rel_diff"] = (c - s) / s if c is not None and s else None
        out[short] = row
    return out
