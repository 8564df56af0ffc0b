"""Load: seeded arrival schedules and an async streaming client (aiohttp) for OpenAI-compatible ``/v1/completions``
(docs/serving.md, "Load").

Open loop: requests sent at scheduled times (Poisson, constant or gamma intervals, as ``vllm bench serve
--request-rate R --burstiness B`` draws them), optionally capped at ``max_concurrency`` in flight. Closed loop:
``concurrency`` users, each sending its next request when its last one finished. Every record keeps its scheduled,
slot and send times: the *queue wait* (part of the load) and the *dispatch delay* (the client's own lateness),
which vLLM's client does not count.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from perfsuite.measure.serving.datasets import Request

MODES = ("poisson", "constant", "gamma", "closed")
# the random draw of open-loop send times (:func:`schedule`), in the identity of a point that draws them: a schedule
# drawn another way is another workload, so runs under the two never meet in one comparison
ARRIVALS = "mt19937-as-vllm"
_SPIN_S = 0.002  # sleep until this close to a send time, then yield in a loop: asyncio's timers wake ~1 ms late


@dataclass(frozen=True)
class LoadSpec:
    mode: str = "poisson"
    rate: float = math.inf  # requests/s (open loop)
    burstiness: float = 1.0  # gamma shape; 1 = Poisson
    max_concurrency: int | None = None  # open loop: cap on requests in flight
    concurrency: int = 1  # closed loop: users
    num_requests: int = 16
    warmup: int = 2  # requests sent and discarded before the timed ones
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"load mode {self.mode!r}: use one of {', '.join(MODES)}")
        if self.mode != "closed" and not self.rate > 0:
            raise ValueError(f"load rate {self.rate!r}: requests per second must be > 0 (inf: all at once)")
        if self.mode == "gamma" and not self.burstiness > 0:
            raise ValueError(f"burstiness {self.burstiness!r} must be > 0")
        if self.num_requests < 1 or self.warmup < 0 or self.concurrency < 1:
            raise ValueError("num_requests and concurrency must be >= 1, warmup >= 0")

    @property
    def slug(self) -> str:
        if self.mode == "closed":
            return f"closed-c{self.concurrency}"
        burst = f"-b{self.burstiness:g}" if self.mode == "gamma" else ""
        return f"{self.mode}-r{self.rate:g}{burst}" + (f"-c{self.max_concurrency}" if self.max_concurrency else "")


_SPEC = re.compile(r"^(poisson|constant|gamma|closed):([0-9.]+|inf)(?::([0-9.]+))?(?:@(\d+))?$")


def parse_load(text: str, **kw: Any) -> LoadSpec:
    """``poisson:4`` (4 req/s), ``constant:2``, ``gamma:4:0.5`` (burstiness 0.5), ``closed:8`` (8 users);
    ``@N`` caps an open-loop point at N requests in flight (``poisson:8@4``)."""
    m = _SPEC.match(text.strip())
    if not m:
        raise ValueError(f"load point {text!r}: write poisson:RATE, constant:RATE, gamma:RATE:BURSTINESS or "
                         "closed:USERS, optionally @MAX_CONCURRENCY")
    mode, num, extra, cap = m.groups()
    if mode == "closed":
        return LoadSpec("closed", concurrency=int(float(num)), **kw)
    if extra and mode != "gamma":
        raise ValueError(f"load point {text!r}: only gamma takes a burstiness")
    return LoadSpec(mode, rate=float(num), burstiness=float(extra) if extra else 1.0,
                    max_concurrency=int(cap) if cap else None, **kw)


def schedule(spec: LoadSpec, n: int | None = None) -> np.ndarray:
    """Send offsets in seconds from the start of the timed phase, drawn as ``vllm bench serve`` draws them, so that
    one ``seed`` is one arrival schedule in both clients: numpy's legacy ``RandomState(seed)`` (as
    ``np.random.seed`` in vllm/benchmarks/serve.py), gamma(shape=b, scale=1/(rate*b)) intervals (b = 1: Poisson),
    cumulated and scaled so that the last request goes out at n/rate (one seed's throughput does not wander 1-2 %).
    Pinned against vLLM 0.32's draws in tests/serve/test_serve_load.py. Until 2026-12-05 the draw was
    ``default_rng(seed)``, another schedule: :data:`ARRIVALS` keeps such runs out of one comparison."""
    n = spec.num_requests if n is None else n
    if spec.mode == "closed" or math.isinf(spec.rate):
        return np.zeros(n)
    if spec.mode == "constant":
        gaps = np.full(n, 1.0 / spec.rate)
    else:
        b = spec.burstiness if spec.mode == "gamma" else 1.0
        gaps = np.random.RandomState(spec.seed).gamma(shape=b, scale=1.0 / (spec.rate * b), size=n)
    t = np.cumsum(gaps)
    return t * ((n / spec.rate) / t[-1])


@dataclass
class Record:
    """One request, times in seconds from the start of the timed phase (``perf_counter`` based)."""

    index: int
    prompt_len: int
    output_len: int  # requested
    scheduled_s: float = 0.0
    slot_s: float = 0.0  # a concurrency slot was free (= scheduled without a cap)
    sent_s: float = 0.0  # handed to the HTTP client: TTFT and latency count from here, as vLLM's
    ttft_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)  # gap before each chunk after the first
    latency_s: float = 0.0  # until the last chunk with a choice (vLLM's definition)
    output_tokens: int | None = None  # from the final usage chunk
    success: bool = False
    error: str = ""

    @property
    def dispatch_delay_s(self) -> float:
        return self.sent_s - self.slot_s

    @property
    def queue_s(self) -> float:
        return self.slot_s - self.scheduled_s

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["itl_s"] = [round(x, 7) for x in self.itl_s]
        return d


@dataclass
class LoadResult:
    records: list[Record]
    duration_s: float  # start of the timed phase until its last response
    client_cpu_s: float
    aborted: str | None = None  # why sending stopped early (the server died)


def payload(req: Request, model: str) -> dict[str, Any]:
    return {"model": model, "prompt": req.prompt, "max_tokens": req.output_len, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0.0}


def http_error(status: int, content_type: str, body: str) -> str:
    """A failed request's error text in one line: an HTML page (a server that is not OpenAI-compatible, a proxy) is
    named as such instead of copied."""
    if "html" in content_type.lower() or body.lstrip().startswith("<"):
        return f"HTTP {status} with an HTML page, not an OpenAI response: is this an OpenAI-compatible server?"
    return f"HTTP {status}: {' '.join(body.split())[:200]}"


async def send(session: Any, url: str, body: dict[str, Any], rec: Record, t0: float) -> None:
    """Stream one completion; timestamps per SSE event as ``vllm bench serve`` takes them."""
    st = time.perf_counter()
    rec.sent_s = st - t0
    last = st
    first = True
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200 or "html" in resp.content_type:
                rec.error = http_error(resp.status, resp.content_type, await resp.text())
                return
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue  # blank separators, ": ping" comments
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                msg = json.loads(data)
                if msg.get("choices"):
                    now = time.perf_counter()
                    if first:
                        rec.ttft_s, first = now - st, False
                    else:
                        rec.itl_s.append(now - last)
                    last = now
                elif msg.get("usage"):
                    rec.output_tokens = msg["usage"].get("completion_tokens")
                    if msg["usage"].get("prompt_tokens") is not None:  # as vLLM: the server's count
                        rec.prompt_len = int(msg["usage"]["prompt_tokens"])
                elif msg.get("error"):
                    rec.error = str(msg["error"])[:200]
        rec.latency_s = last - st
        rec.success = not first and not rec.error
        if first and not rec.error:
            rec.error = "no chunk with a choice: no first token"
    except asyncio.CancelledError:
        rec.error = rec.error or "cancelled"
        raise
    except Exception as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]


async def _until(t: float) -> None:
    while (left := t - time.perf_counter()) > _SPIN_S:
        await asyncio.sleep(left - _SPIN_S)
    while time.perf_counter() < t:
        await asyncio.sleep(0)


async def _run(url: str, model: str, reqs: Sequence[Request], spec: LoadSpec, warm: Sequence[Request],
               abort: Callable[[], str | None] | None, timeout_s: float,
               on_timed_start: Callable[[], None] | None) -> LoadResult:
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=False),
                                     timeout=aiohttp.ClientTimeout(total=timeout_s), trust_env=False) as session:
        for i in range(0, len(warm), 4):  # warm-up, excluded: connections, server-side caches of the first shapes
            await asyncio.gather(*(send(session, url, payload(r, model), Record(-1, r.prompt_len, r.output_len), 0.0)
                                   for r in warm[i:i + 4]))
        records = [Record(i, r.prompt_len, r.output_len) for i, r in enumerate(reqs)]
        stop = asyncio.Event()
        why: list[str] = []

        async def watch() -> None:
            while not stop.is_set():
                if abort and (reason := abort()):
                    why.append(reason)
                    stop.set()
                    return
                await asyncio.sleep(0.2)

        if on_timed_start is not None:
            await asyncio.to_thread(on_timed_start)
        sem = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None  # open loop's cap
        cpu0 = time.process_time()
        t0 = time.perf_counter()

        async def one(i: int) -> None:
            rec = records[i]
            async with sem or contextlib.nullcontext():
                rec.slot_s = rec.scheduled_s if sem is None else time.perf_counter() - t0
                await send(session, url, payload(reqs[i], model), rec, t0)

        watcher = asyncio.create_task(watch())
        tasks: list[asyncio.Task[None]] = []
        if spec.mode == "closed":
            nxt = iter(range(len(reqs)))

            async def user() -> None:
                free = 0.0
                for i in nxt:
                    if stop.is_set():
                        return
                    records[i].scheduled_s = records[i].slot_s = free
                    await send(session, url, payload(reqs[i], model), records[i], t0)
                    free = time.perf_counter() - t0

            tasks = [asyncio.create_task(user()) for _ in range(spec.concurrency)]
        else:
            for i, off in enumerate(schedule(spec, len(reqs))):
                await _until(t0 + float(off))
                if stop.is_set():
                    break
                records[i].scheduled_s = float(off)
                tasks.append(asyncio.create_task(one(i)))
        waiter: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*tasks, return_exceptions=True))
        stopper: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set() and not waiter.done():
            for t in tasks:
                t.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
        duration = time.perf_counter() - t0  # as vLLM: start of the timed phase until every request is done
        cpu = time.process_time() - cpu0
        stop.set()
        await watcher
        await stopper
    for r in records:
        if not r.success and not r.error:
            r.error = f"not sent: {why[0]}" if why else "not sent"
    return LoadResult(records, duration, cpu, why[0] if why else None)


def run_load(base_url: str, model: str, reqs: Sequence[Request], spec: LoadSpec, *, warmup: Sequence[Request] = (),
             abort: Callable[[], str | None] | None = None, timeout_s: float = 600.0,
             on_timed_start: Callable[[], None] | None = None, cpus: Sequence[int] | None = None) -> LoadResult:
    """Run one load point against ``base_url`` (``http://127.0.0.1:PORT``) and return every request's record.
    ``abort`` is polled while the load runs: a reason (the server exited) stops sending and cancels what is in
    flight; those requests count as failed. ``on_timed_start`` runs between the warm-up and the timed phase.
    ``cpus``: the cores the calling thread (the event loop, and threads it starts) runs on for the load's length
    (``Server.client_cpus``: the ones the server does not have), restored afterwards."""
    url = base_url.rstrip("/") + "/v1/completions"
    with _pinned(cpus), _gc_frozen():
        return asyncio.run(_run(url, model, reqs, spec, warmup, abort, timeout_s, on_timed_start))


@contextlib.contextmanager
def _gc_frozen() -> Iterator[None]:
    """Every object alive before the load out of the collector's reach for the load's length (``gc.freeze``): in a
    process holding torch a full collection is a stall of ~50 ms on whichever send or chunk is due (docs/serving.md).
    The young generations still run, so a long sweep's garbage is still collected."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _pinned(cpus: Sequence[int] | None) -> Iterator[None]:
    """This thread on ``cpus`` inside the block (Linux: a thread's own affinity; pid 0 is the calling thread). Why:
    an unpinned client was sometimes scheduled beside the server and sent late (docs/serving.md, "Pinning the load
    generator pays")."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, set(cpus))
    except OSError:
        before = set()
    try:
        yield
    finally:
        if before:
            os.sched_setaffinity(0, before)
