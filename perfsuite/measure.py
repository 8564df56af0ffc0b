"""The timed loops. Each turns one phase of generation into pytest-benchmark rounds, so that the statistics
pytest-benchmark prints and compares are per-token latencies:

* TTFT: a round is one prefill, until the first tokens are on the host.
* TPOT: a round is one decode step (one token per sequence); rounds walk through whole generations, so the
  contexts are spread over prompt+1 ... prompt+n-1. The prefill that starts each generation is in the untimed
  setup.
* E2E: a round is one full generation (prefill + n-1 decode steps); timestamps inside it give vLLM's
  per-request TTFT, ITL and TPOT.

Backends return tokens as host lists, so every timed call ends with the device synchronised.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from perfsuite import metrics
from perfsuite.backends.base import Backend, StepResult
from perfsuite.cells import Cell


class TokenCountError(AssertionError):
    pass


def _check(step: StepResult, batch: int, what: str) -> None:
    if len(step.tokens) != batch:
        raise TokenCountError(f"{what} returned {len(step.tokens)} tokens for a batch of {batch}")


@dataclass
class Measurement:
    """What one test measured: raw per-unit samples (ms) and the exact token count."""

    metric: str
    samples: dict[str, list[float]] = field(default_factory=dict)
    generated_tokens: int = 0
    tokens: list[list[int]] = field(default_factory=list)  # last generation, per sequence

    def aggregates(self, cell: Cell) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in ("ttft", "tpot", "itl", "e2el"):
            out.update(metrics.summarize(name, self.samples.get(f"{name}_ms", [])))
        sc = cell.scenario
        if "e2el_ms" in self.samples:
            mean_e2el_s = out["mean_e2el_ms"] / 1e3
            out["output_throughput_tokens_per_s"] = sc.batch_size * sc.new_tokens / mean_e2el_s
        if "ttft_ms" in self.samples:
            out["prefill_throughput_tokens_per_s"] = sc.batch_size * sc.prompt_tokens / (out["mean_ttft_ms"] / 1e3)
        if "tpot_ms" in self.samples and "e2el_ms" not in self.samples:
            out["output_throughput_tokens_per_s"] = sc.batch_size / (out["mean_tpot_ms"] / 1e3)
        return out


def _round_ms(benchmark: Any) -> list[float]:
    return [s * 1e3 for s in benchmark.stats.stats.data]


def measure_ttft(benchmark: Any, backend: Backend, prompts: list[list[int]], generations: int,
                 warmup: int) -> Measurement:
    batch = len(prompts)
    last: list[StepResult] = []

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        while last:
            backend.release(last.pop().state)
        return (), {}

    def target() -> None:
        step = backend.prefill(prompts)
        last.append(step)

    benchmark.pedantic(target, setup=setup, rounds=generations, warmup_rounds=warmup, iterations=1)
    _check(last[0], batch, "prefill")
    m = Measurement("ttft", {"ttft_ms": _round_ms(benchmark)}, generated_tokens=batch * generations,
                    tokens=[[t] for t in last[0].tokens])
    setup()
    return m


class _DecodeWalk:
    """Stateful setup/target pair: each round decodes one step; a new generation starts when one ends."""

    def __init__(self, backend: Backend, prompts: list[list[int]], new_tokens: int) -> None:
        self.backend, self.prompts, self.n = backend, prompts, new_tokens
        self.state: Any = None
        self.produced = 0  # tokens per sequence in the current generation
        self.seqs: list[list[int]] = []
        self.finished: list[list[list[int]]] = []

    def setup(self) -> tuple[tuple[Any], dict[str, Any]]:
        if self.state is None or self.produced == self.n:
            self._end()
            first = self.backend.prefill(self.prompts)
            _check(first, len(self.prompts), "prefill")
            self.state, self.produced, self.seqs = first.state, 1, [[t] for t in first.tokens]
        return (self.state,), {}

    def target(self, state: Any) -> None:
        step = self.backend.decode(state)
        self.state = step.state
        for seq, tok in zip(self.seqs, step.tokens, strict=False):
            seq.append(tok)
        self.produced += 1
        if len(step.tokens) != len(self.prompts):
            raise TokenCountError(f"decode returned {len(step.tokens)} tokens for a batch of {len(self.prompts)}")

    def _end(self) -> None:
        if self.state is not None:
            if self.produced == self.n:
                self.finished.append(self.seqs)
            self.backend.release(self.state)
            self.state = None


def measure_tpot(benchmark: Any, backend: Backend, prompts: list[list[int]], new_tokens: int, generations: int,
                 warmup: int) -> Measurement:
    walk = _DecodeWalk(backend, prompts, new_tokens)
    steps = new_tokens - 1
    # Warm-up rounds are whole generations too, so timed rounds start at a generation boundary.
    benchmark.pedantic(walk.target, setup=walk.setup, rounds=generations * steps, warmup_rounds=warmup * steps,
                       iterations=1)
    walk._end()
    timed = walk.finished[warmup:]
    if len(timed) != generations or any(len(s) != new_tokens for g in timed for s in g):
        raise TokenCountError(f"expected {generations} generations of {new_tokens} tokens per sequence")
    itl = _round_ms(benchmark)
    per_gen = [sum(itl[i:i + steps]) / steps for i in range(0, len(itl), steps)]
    return Measurement("tpot", {"itl_ms": itl, "tpot_ms": per_gen},
                       generated_tokens=len(prompts) * generations * steps, tokens=timed[-1])


def measure_e2e(benchmark: Any, backend: Backend, prompts: list[list[int]], new_tokens: int, generations: int,
                warmup: int) -> Measurement:
    batch = len(prompts)
    ttft: list[float] = []
    itl: list[float] = []
    gens: list[list[list[int]]] = []
    pending: list[Any] = []

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        # Dropping the finished generation's state is not part of its latency (vLLM's e2el ends at the last token).
        while pending:
            backend.release(pending.pop())
        return (), {}

    def target() -> None:
        t0 = time.perf_counter()
        step = backend.prefill(prompts)
        t = time.perf_counter()
        ttft.append((t - t0) * 1e3)
        seqs = [[tok] for tok in step.tokens]
        _check(step, batch, "prefill")
        for _ in range(new_tokens - 1):
            step = backend.decode(step.state)
            now = time.perf_counter()
            itl.append((now - t) * 1e3)
            t = now
            for seq, tok in zip(seqs, step.tokens, strict=False):
                seq.append(tok)
        pending.append(step.state)
        gens.append(seqs)

    benchmark.pedantic(target, setup=setup, rounds=generations, warmup_rounds=warmup, iterations=1)
    setup()
    steps = new_tokens - 1
    ttft, itl, gens = ttft[warmup:], itl[warmup * steps:], gens[warmup:]
    if len(gens) != generations or any(len(s) != new_tokens for g in gens for s in g):
        raise TokenCountError(f"expected {generations} generations of {new_tokens} tokens per sequence")
    e2el = _round_ms(benchmark)
    tpot = [metrics.tpot_ms(e, f, new_tokens) for e, f in zip(e2el, ttft, strict=True)]
    return Measurement("e2el", {"ttft_ms": ttft, "tpot_ms": tpot, "itl_ms": itl, "e2el_ms": e2el},
                       generated_tokens=batch * generations * new_tokens, tokens=gens[-1])


def standalone_benchmark(name: str) -> Any:
    """pytest-benchmark's own BenchmarkFixture outside a pytest session (harness-overhead runs, unit tests)."""
    from types import SimpleNamespace

    from pytest_benchmark.fixture import BenchmarkFixture
    from pytest_benchmark.utils import load_timer

    node = SimpleNamespace(name=name, nodeid=name)
    return BenchmarkFixture(node, disable_gc=False, timer=load_timer("time.perf_counter"), min_rounds=1,
                            min_time=0.0, max_time=1.0, precision=None, confidence=None, warmup=False,
                            warmup_iterations=0, calibration_precision=10, add_stats=lambda stats: None,
                            logger=None, warner=lambda *a, **k: None, disabled=False, cprofile=False,
                            cprofile_loops=None, cprofile_dump=False)
