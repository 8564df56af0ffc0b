"""``perfsuite overhead``: a decode step as the suite times it (perfsuite.measure.loop, as the workers run it) ÷ the
same step in a bare timed loop. Both run in one process, interleaved block by block, so the between-process spread
does not enter the ratio."""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from perfsuite.adapters.cli._common import add_command, measuring
from perfsuite.facts import models
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure import loop as measure
from perfsuite.measure.backends.base import has_steps


def register(sub: Any) -> None:
    p = add_command(sub, "overhead", "measure the harness overhead on the decode step time (goal <= 1.01)", None, main)
    p.add_argument("--backend", default="torch")
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--blocks", type=int, default=10, help="interleaved blocks per method (default 10)")
    p.add_argument("--generations", type=int, default=5, help="generations per block (default 5)")
    p.add_argument("--new-tokens", type=int, default=32)


def bare_decode_steps_ms(backend: Any, prompts: list[list[int]], n: int, generations: int) -> list[float]:
    out = []
    for _ in range(generations):
        step = backend.prefill(prompts)
        for _ in range(n - 1):
            t0 = time.perf_counter()
            step = backend.decode(step.state)
            out.append((time.perf_counter() - t0) * 1e3)
        backend.release(step.state)
    return out


def main(args: argparse.Namespace) -> int:
    from perfsuite.measure.backends import create

    resolved = models.resolve(args.model)
    cell = Cell(args.backend, args.model, "float32", Scenario("overhead", 1, 64, args.new_tokens),
                model_dir=resolved.path)
    backend = create(cell)
    reason = backend.availability()
    if reason:
        print(f"perfsuite overhead: {args.backend} unavailable: {reason}")
        return 2
    if not has_steps(backend):
        print(f"perfsuite overhead: {args.backend} has no decode steps to time (it runs whole generations only)")
        return 2
    with measuring("overhead"):  # one perfsuite run measures at a time
        backend.load()
        try:
            prompts = models.prompts(1, 64, resolved.vocab_size)
            bare_decode_steps_ms(backend, prompts, args.new_tokens, 2)  # warm-up
            suite: list[float] = []
            bare: list[float] = []
            for _ in range(args.blocks):
                bare += bare_decode_steps_ms(backend, prompts, args.new_tokens, args.generations)
                m = measure.measure_generations(backend, prompts, args.new_tokens, args.generations, 0, ["tpot"])["tpot"]
                suite += [r * 1e3 for r in m.rounds_s]
        finally:
            backend.close()
    s_med, b_med = statistics.median(suite), statistics.median(bare)
    s_mean, b_mean = statistics.fmean(suite), statistics.fmean(bare)
    print(f"steps per method: {len(suite)}")
    print(f"suite decode step median {s_med:.4f} ms, mean {s_mean:.4f} ms")
    print(f"bare  decode step median {b_med:.4f} ms, mean {b_mean:.4f} ms")
    print(f"overhead ratio (median) {s_med / b_med:.4f}; (mean) {s_mean / b_mean:.4f}; goal <= 1.01")
    return 0
