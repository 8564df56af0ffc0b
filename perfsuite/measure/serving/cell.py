"""Serving cells: ``[tool.perfsuite.serving.<profile>]`` -> cells of backend ``vllm-serve`` (model x dtype x prefix
caching x load point), one vLLM server per (model, dtype, prefix caching) and start, and what a start measures.

A replicate is a server start (the unit the gate compares, as a worker process is for the other cells): each start
runs every load point of its server once, in a seeded random order; ``server_starts`` starts per server.
"""

from __future__ import annotations

import contextlib
import functools
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite.facts import identity_hash
from perfsuite.facts.cells import DTYPES, model_slug
from perfsuite.facts.config import tomllib
from perfsuite.facts.schema import Field, checked, first_unknown
from perfsuite.measure.serving.metrics import parse_goodput
from perfsuite.measure.serving.point import Point, point_from, run_point
from perfsuite.measure.serving.server import Server, ServerError, free_port, server_cpus, vllm_argv, vllm_env
from perfsuite.measure.serving.sweep import sweep_cell_point

BACKEND = "vllm-serve"
_FIELDS = {  # the scalar keys; models, prefix_caching, points and goodput are read below
    "server_starts": Field("int", "server starts per cell (the replicate)", minimum=1),
    "max_failed_fraction": Field("float", "failed requests a cell tolerates", minimum=0.0, maximum=1.0,
                                 max_open=True),
    "start_timeout_s": Field("float", "seconds until the server is healthy", minimum=0.0, min_open=True),
    "kv_cache_space_gib": Field("int", "VLLM_CPU_KVCACHE_SPACE of the server", minimum=1),
}
_KEYS = {"models", "dtype", "prefix_caching", "points", "goodput", *_FIELDS}


@dataclass(frozen=True)
class ServeCell:
    model: str
    dtype: str
    prefix_caching: bool
    point: Point
    seed: int = 0

    @property
    def server_key(self) -> tuple[str, str, bool]:
        return (self.model, self.dtype, self.prefix_caching)

    @property
    def id(self) -> str:
        pc = "pc" if self.prefix_caching else "nopc"
        return f"{BACKEND}-{model_slug(self.model)}-{self.dtype}-{pc}-{self.point.slug}"

    def as_dict(self) -> dict[str, Any]:
        ident = {"point": self.point.as_dict(), "prefix_caching": self.prefix_caching, "device": "cpu"}
        return {"backend": BACKEND, "model": self.model, "dtype": self.dtype, "prefix_caching": self.prefix_caching,
                "point": self.point.as_dict(), "id": self.id, "device": "cpu", "seed": self.seed,
                "options_hash": identity_hash(ident, separators=(", ", ": "))}  # as serving runs were recorded


@dataclass(frozen=True)
class ServingConfig:
    cells: tuple[ServeCell, ...] = ()
    server_starts: int = 1
    goodput: Mapping[str, float] = field(default_factory=dict)
    max_failed_fraction: float = 0.0
    start_timeout_s: float = 900.0
    kv_cache_space_gib: int = 1


def load(pyproject: Path | None, profile: str) -> ServingConfig:
    """The profile's serving table; none -> no serving cells. Bad keys/values: ValueError naming the key."""
    if pyproject is None or not pyproject.is_file():
        return ServingConfig()
    raw = tomllib.loads(pyproject.read_text()).get("tool", {}).get("perfsuite", {}).get("serving", {})
    return parse(raw.get(profile, {}), f"[tool.perfsuite.serving.{profile}]")


def parse(t: Mapping[str, Any], where: str) -> ServingConfig:
    if not t:
        return ServingConfig()
    bad = first_unknown(t, _KEYS)
    if bad:
        raise ValueError(f"{where} {bad}: unknown key; allowed: {', '.join(sorted(_KEYS))}")
    dtype = checked(f"{where} dtype", t.get("dtype", "float32"), Field("str", choices=DTYPES))
    models = t.get("models", ["tiny-llama"])
    pcs = t.get("prefix_caching", [True])
    if not (isinstance(models, list) and models and isinstance(pcs, list) and pcs
            and all(isinstance(b, bool) for b in pcs)):
        raise ValueError(f"{where}: models must be a list of names and prefix_caching a list of true/false")
    pts = [point_from(p, f"{where} points[{i}]") for i, p in enumerate(t.get("points", []))]
    cells = tuple(ServeCell(m, dtype, pc, p) for m in models for pc in pcs for p in pts)
    v = {k: checked(f"{where} {k}", t.get(k, getattr(ServingConfig, k)), spec) for k, spec in _FIELDS.items()}
    return ServingConfig(cells, v["server_starts"], parse_goodput(t["goodput"]) if "goodput" in t else {},
                         float(v["max_failed_fraction"]), float(v["start_timeout_s"]), v["kv_cache_space_gib"])


@contextlib.contextmanager
def started_server(model: str, *, dtype: str = "float32", prefix_caching: bool = True,
                   cache_dir: Path | None = None, start_timeout_s: float = 900.0, kv_cache_space_gib: int = 1,
                   log_dir: Path | None = None, keep_logs: bool = False) -> Iterator[tuple[Server, str, int, Path]]:
    """vLLM's server for a perfsuite model (materialised as for every cell, plus the word tokenizer), stopped with
    all its children when the block ends however it ends. Yields (server, served name, vocab size, cache dir).
    Without ``log_dir`` the log goes to a temporary folder, removed after a clean stop unless ``keep_logs``; a
    failure keeps it (its error names the log)."""
    from perfsuite.facts import models
    from perfsuite.measure.serving import tokenizer

    cache = cache_dir or models.default_cache_dir()
    resolved = models.resolve(model, cache)
    name = model_slug(model)
    folder = tokenizer.serving_dir(resolved.path, cache, f"{name}-{resolved.digest}")
    port = free_port()
    logs = log_dir or Path(tempfile.mkdtemp(prefix="perfsuite-serve-"))
    srv = Server(vllm_argv(folder, served_name=name, port=port, dtype=dtype, prefix_caching=prefix_caching),
                 port=port, log_path=logs / f"vllm-{name}-{port}.log", env=vllm_env(kv_cache_space_gib),
                 start_timeout_s=start_timeout_s, name=f"vLLM server ({model}, port {port})", cpus=server_cpus())
    with srv:
        yield srv, name, resolved.vocab_size, cache
    if log_dir is None and not keep_logs:  # only after a clean stop: an error or Ctrl-C never gets here
        shutil.rmtree(logs, ignore_errors=True)


@dataclass
class Replicate:
    """One point measured in one server start."""

    index: int
    pid: int
    start_s: float
    result: dict[str, Any]


@dataclass
class CellRuns:
    cell: ServeCell
    replicates: list[Replicate] = field(default_factory=list)
    error: str | None = None


def measure(cells: Sequence[ServeCell], conf: ServingConfig, cache_dir: Path | None, seed: int | None = None,
            say: Callable[[str], None] | None = None) -> dict[str, CellRuns]:
    """Every start of every server, each running its points in a random order. A failed start or a server that
    dies fails that server's cells (with the log's tail); a point over the failure threshold fails its cell."""
    say = say or (lambda _: None)
    rng = random.Random(seed)
    out = {c.id: CellRuns(c) for c in cells}
    servers: dict[tuple[str, str, bool], list[ServeCell]] = {}
    for c in cells:
        servers.setdefault(c.server_key, []).append(c)
    for (model, dtype, pc), group in servers.items():
        for start in range(conf.server_starts):
            try:
                with started_server(model, dtype=dtype, prefix_caching=pc, cache_dir=cache_dir,
                                    start_timeout_s=conf.start_timeout_s,
                                    kv_cache_space_gib=conf.kv_cache_space_gib) as (srv, name, vocab, cache):
                    say(f"perfsuite: {srv.name} healthy after {srv.start_s:.1f} s (start {start + 1}/"
                        f"{conf.server_starts})")
                    order = list(group)
                    rng.shuffle(order)
                    at = functools.partial(run_point, srv.base_url, name, vocab_size=vocab, cache_dir=cache,
                                           slos_ms=conf.goodput or None, max_failed_fraction=conf.max_failed_fraction,
                                           abort=srv.abort_reason, client_cpus=srv.client_cpus)
                    for c in order:
                        if out[c.id].error:
                            continue
                        r = sweep_cell_point(at, c.point) if c.point.sweep else at(c.point)
                        if c.point.sweep:
                            srv.check()  # saturation stops a sweep; a dead server fails it
                            say(f"perfsuite: {c.id}: sweep stopped {r['sweep']['stopped']}; knee "
                                f"{r['sweep']['knee_rate']} req/s")
                        if r["failure"]:
                            srv.check()  # a dead server says so with its log's tail
                            out[c.id].error = f"{c.id}: {r['failure']}"
                        out[c.id].replicates.append(Replicate(start, srv.proc.pid if srv.proc else 0, srv.start_s, r))
                        say(summary(r))
            except ServerError as exc:
                for c in group:
                    out[c.id].error = out[c.id].error or str(exc)
                break
    return out


def prometheus_problem(runs: CellRuns) -> str | None:
    """Every start's /metrics must exist and have seen exactly the requests the client completed."""
    for rep in runs.replicates:
        prom, m = rep.result["prometheus"], rep.result["metrics"]
        if not prom.get("available"):
            return "the server's /metrics has no latency histograms to cross-check"
        ttft = prom.get("ttft") or {}
        if ttft.get("count") != m["completed"]:
            return (f"the server's TTFT histogram counted {ttft.get('count')} requests over the load point, the "
                    f"client completed {m['completed']}")
    return None


def summary(r: dict[str, Any]) -> str:
    """One line of a measured serving point (a server start's result): completions, throughputs, medians, the
    client's dispatch delay and CPU share."""
    m = r["metrics"]
    if not m["completed"]:  # no latency to report: 0.0 ms would read as a figure
        top = next(iter(m.get("errors") or {}), "no error text")
        return f"perfsuite serve: {r['point']['slug']}: 0/{m['num_prompts']} ok, no request completed: {top}"
    good = f", goodput {m['request_goodput']:.2f} req/s" if "request_goodput" in m else ""
    return (f"perfsuite serve: {r['point']['slug']}: {m['completed']}/{m['num_prompts']} ok, "
            f"{m['request_throughput']:.2f} req/s, {m['output_throughput']:.1f} tok/s{good}; median TTFT "
            f"{m['median_ttft_ms']:.1f} ms, TPOT {m['median_tpot_ms']:.2f} ms, ITL {m['median_itl_ms']:.2f} ms; "
            f"dispatch delay p99 {m['p99_dispatch_delay_ms']:.3f} ms, client CPU {m['client_cpu_share']:.0%}")
