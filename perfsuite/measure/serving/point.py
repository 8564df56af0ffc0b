"""One load point (a dataset and a load), run against a base URL: what ``perfsuite serve`` and the serving cells
both do. The result is one JSON-able dict: the point, vLLM-named metrics, the client's own cost, the Prometheus
cross-check and every request's record."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.facts.schema import first_unknown
from perfsuite.measure.serving import datasets, metrics, promcheck
from perfsuite.measure.serving.datasets import Request
from perfsuite.measure.serving.load import ARRIVALS, LoadSpec, parse_load, run_load

SCHEMA = "perfsuite-serve/1"
PROMPTS = ("ids", "text")


@dataclass(frozen=True)
class Point:
    load: LoadSpec = field(default_factory=LoadSpec)
    dataset: str = "random"
    input_len: int = 64
    output_len: int = 16
    prefix_len: int = 0  # shared-prefix: tokens of the common prefix (input_len is the suffix)
    prefix_groups: int = 4
    sharegpt_path: str | None = None  # default: generated into the cache
    sweep: tuple[float, ...] = ()  # rising rates above load.rate: the cell sweeps to saturation (serving.sweep)
    prompt: str = "ids"  # "ids": token-id prompts; "text": the same tokens as words, tokenized by the server (as
    #                      vllm bench serve's random dataset sends them)

    def __post_init__(self) -> None:
        if self.dataset not in datasets.DATASETS:
            raise ValueError(f"dataset {self.dataset!r}: use one of {', '.join(datasets.DATASETS)}")
        if self.prompt not in PROMPTS:
            raise ValueError(f"prompt {self.prompt!r}: use one of {', '.join(PROMPTS)}")
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError("input_len and output_len must be >= 1")
        if self.dataset == "shared-prefix" and self.prefix_len < 1:
            raise ValueError("the shared-prefix dataset needs prefix_len >= 1")
        if self.sweep and (self.load.mode == "closed" or list(self.sweep) != sorted(set(self.sweep))
                           or self.sweep[0] <= self.load.rate):
            raise ValueError(f"sweep {list(self.sweep)}: write rising request rates above the open-loop load's "
                             f"rate ({self.load.slug}), e.g. load = \"poisson:2\", sweep = [4, 8, 16]")

    @property
    def slug(self) -> str:
        ds = {"random": f"random-i{self.input_len}-o{self.output_len}",
              "sharegpt": f"sharegpt-o{self.output_len}" if self.output_len else "sharegpt",
              "shared-prefix": f"prefix{self.prefix_len}x{self.prefix_groups}-i{self.input_len}-o{self.output_len}"}
        sweep = f"-sweep{self.sweep[-1]:g}" if self.sweep else ""
        text = "-text" if self.prompt == "text" and self.dataset != "sharegpt" else ""
        return f"{ds[self.dataset]}{text}-{self.load.slug}-n{self.load.num_requests}{sweep}"

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.sweep:
            d["sweep"] = list(self.sweep)
        else:  # a point without a sweep keeps the options hash it had before sweeps existed
            del d["sweep"]
        if self.prompt == "ids":  # likewise a point of token-id prompts
            del d["prompt"]
        if self.load.mode in ("poisson", "gamma") and not math.isinf(self.load.rate):
            d["arrivals"] = ARRIVALS  # drawn send times: how they are drawn is part of the workload
        d["slug"] = self.slug
        return d


def point_from(table: Mapping[str, Any], where: str = "point") -> Point:
    """``{load = "poisson:4", num_prompts = 24, warmup = 2, seed = 0, dataset = "random", input_len = 64, ...}``"""
    direct = ("dataset", "input_len", "output_len", "prefix_len", "prefix_groups", "sharegpt_path", "prompt")
    allowed = {"load", "num_prompts", "warmup", "seed", "sweep", *direct}
    bad = first_unknown(table, allowed)
    if bad:
        raise ValueError(f"{where}: unknown key {bad!r}; allowed: {', '.join(sorted(allowed))}")
    spec = parse_load(str(table.get("load", "poisson:4")), num_requests=int(table.get("num_prompts", 16)),
                      warmup=int(table.get("warmup", 2)), seed=int(table.get("seed", 0)))
    kw = {k: table[k] for k in direct if k in table}
    if "sweep" in table:
        sw = table["sweep"]
        if not isinstance(sw, list) or not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in sw):
            raise ValueError(f"{where} sweep: a list of request rates, e.g. [4, 8, 16], got {sw!r}")
        kw["sweep"] = tuple(float(r) for r in sw)
    try:
        return Point(spec, **kw)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def requests(point: Point, vocab_size: int, cache_dir: Path) -> list[Request]:
    n, seed = point.load.num_requests + point.load.warmup, point.load.seed
    if point.dataset == "random":
        reqs = datasets.random_requests(n, point.input_len, point.output_len, vocab_size, seed)
    elif point.dataset == "shared-prefix":
        reqs = datasets.shared_prefix_requests(n, point.prefix_len, point.input_len, point.output_len, vocab_size,
                                               point.prefix_groups, seed)
    else:
        path = Path(point.sharegpt_path) if point.sharegpt_path else \
            datasets.write_sharegpt(cache_dir / "datasets" / f"sharegpt-v{vocab_size}-s0.json", 400, vocab_size)
        reqs = datasets.sharegpt_requests(path, n, seed, fixed_output_len=point.output_len or None)
    if point.prompt == "text":
        reqs = [datasets.as_text(r) for r in reqs]
    return reqs


def run_point(base_url: str, model: str, point: Point, *, vocab_size: int, cache_dir: Path,
              slos_ms: Mapping[str, float] | None = None, max_failed_fraction: float = 0.0,
              abort: Callable[[], str | None] | None = None, timeout_s: float = 600.0,
              client_cpus: Sequence[int] | None = None) -> dict[str, Any]:
    """One load point; ``client_cpus``: where the load generator runs (``Server.client_cpus`` of a server perfsuite
    started; None: where the kernel puts it)."""
    reqs = requests(point, vocab_size, cache_dir)
    warm, timed = reqs[:point.load.warmup], reqs[point.load.warmup:]
    before: list[Any] = []  # taken between the warm-up and the timed requests: the histograms exclude the warm-up
    res = run_load(base_url, model, timed, point.load, warmup=warm, abort=abort, timeout_s=timeout_s,
                   on_timed_start=lambda: before.append(promcheck.snapshot(base_url)), cpus=client_cpus)
    prev = before[0] if before else None
    after = promcheck.snapshot(base_url) if prev is not None else None
    m = metrics.compute(res, slos_ms)
    return {"point": point.as_dict(), "model": model, "base_url": base_url, "metrics": m,
            "client_cpus": list(client_cpus) if client_cpus else None,
            "samples": metrics.samples_ms(res.records), "prometheus": promcheck.compare(prev, after, m),
            "aborted": res.aborted, "failure": metrics.failure(m, max_failed_fraction) or res.aborted,
            "records": [r.as_dict() for r in res.records]}
