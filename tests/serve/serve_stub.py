"""A stub OpenAI-compatible server on loopback: streams SSE completion chunks with controlled delays, keeps
Prometheus histograms of what it did (its own registry) and can fail chosen requests. Runs in a thread."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Stub:
    ttft_s: float = 0.03
    itl_s: float = 0.01
    fail_every: int = 0  # every k-th timed request gets HTTP 500 (0: none)
    usage: bool = True
    tokens_per_chunk: int = 1
    arrivals: list[float] = field(default_factory=list)  # perf_counter at each request's arrival
    bodies: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    max_inflight: int = 0  # > 0: requests beyond it wait (a server with a capacity: saturation)

    def __post_init__(self) -> None:
        from prometheus_client import CollectorRegistry, Histogram

        self.registry = CollectorRegistry()
        b = (0.001, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
        self.h_ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", ["model_name"], buckets=b,
                                registry=self.registry)
        self.h_itl = Histogram("vllm:inter_token_latency_seconds", "itl", ["model_name"], buckets=b,
                               registry=self.registry)
        self.h_e2e = Histogram("vllm:e2e_request_latency_seconds", "e2e", ["model_name"], buckets=b,
                               registry=self.registry)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def completions(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        self.arrivals.append(t0)
        body = await request.json()
        self.bodies.append(body)
        if self.fail_every and len(self.bodies) % self.fail_every == 0:
            return web.Response(status=500, text="stub: planned failure")
        n = int(body["max_tokens"])
        if self.max_inflight:
            if not hasattr(self, "_sem"):
                self._sem = asyncio.Semaphore(self.max_inflight)
            async with self._sem:
                return await self._stream(request, body, n, t0)
        return await self._stream(request, body, n, t0)

    async def _stream(self, request: web.Request, body: dict[str, Any], n: int, t0: float) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(obj: Any) -> None:
            await resp.write(f"data: {json.dumps(obj)}\n\n".encode())

        await asyncio.sleep(self.ttft_s)
        sent, last = 0, t0
        while sent < n:
            k = min(self.tokens_per_chunk, n - sent)
            await event({"choices": [{"index": 0, "text": " t5" * k}]})
            now = time.perf_counter()
            if sent == 0:
                self.h_ttft.labels("stub").observe(now - t0)
            else:
                self.h_itl.labels("stub").observe(now - last)
            last, sent = now, sent + k
            if sent < n:
                await asyncio.sleep(self.itl_s)
        if self.usage:
            await event({"choices": [], "usage": {"prompt_tokens": len(body["prompt"]) if isinstance(
                body["prompt"], list) else len(body["prompt"].split()), "completion_tokens": n}})
        await resp.write(b"data: [DONE]\n\n")
        self.h_e2e.labels("stub").observe(time.perf_counter() - t0)
        return resp

    async def metrics(self, request: web.Request) -> web.Response:
        from prometheus_client import generate_latest

        return web.Response(body=generate_latest(self.registry), content_type="text/plain")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    def __enter__(self) -> Stub:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        self._error: BaseException | None = None

        def serve() -> None:
            try:
                start()
            except BaseException as exc:
                self._error = exc
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        def start() -> None:
            asyncio.set_event_loop(self._loop)
            app = web.Application()
            app.add_routes([web.post("/v1/completions", self.completions), web.get("/metrics", self.metrics),
                            web.get("/health", self.health), web.get("/v1/models", self.models)])
            self._runner = web.AppRunner(app)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
