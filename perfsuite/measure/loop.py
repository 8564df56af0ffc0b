"""The one timed loop: whole generations (prefill, then one decode step per new token), each timed once, from
which every test's pytest-benchmark rounds are cut, so that the statistics pytest-benchmark prints and compares are
per-token latencies:

* TTFT: a round is one prefill, until the first tokens are on the host.
* TPOT: a round is one decode step (one token per sequence), the decode call alone; rounds walk through whole
  generations, so the contexts are spread over prompt+1 ... prompt+n-1.
* E2E: a round is one full generation (prefill + n-1 decode steps); its timestamps give vLLM's per-request TTFT,
  ITL (token to token, the loop's own bookkeeping included, as a client sees it) and TPOT.

A worker measuring all three runs this loop once (not once per test); a TTFT-only job runs prefills alone. A backend
without steps (perfsuite.measure.backends.base.WholeBackend, e.g. vllm-llm) has each ``generate()`` call timed as one
test_e2el round, and nothing else.
Releasing a finished generation's state is outside every round (vLLM's e2el ends at the last token). Backends return
tokens as host lists, so every timed call ends with the device synchronised.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsuite.facts import metrics
from perfsuite.facts.cells import Cell
from perfsuite.facts.vocabulary import TIMED
from perfsuite.measure.backends.base import Backend, StepResult, has_steps


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
    rounds_s: list[float] = field(default_factory=list)  # pytest-benchmark's rounds of this test (seconds)
    outputs: dict[str, Any] = field(default_factory=dict)  # the generations' tokens (metrics.outputs_record)

    def aggregates(self, cell: Cell) -> dict[str, float]:
        """vLLM's summaries of every latency base sampled, and the throughputs (perfsuite.facts.metrics.aggregates)."""
        return metrics.aggregates(self.samples, cell.scenario)


@dataclass(frozen=True)
class Generation:
    """One timed generation: the prefill, each decode call, each token-to-token interval, the whole (seconds)."""

    ttft_s: float
    step_s: tuple[float, ...]
    itl_s: tuple[float, ...]
    e2el_s: float
    tokens: tuple[tuple[int, ...], ...]  # per sequence
    steps: bool = True  # False: one whole-generation call, only e2el_s is a measurement


def generate(backend: Backend, prompts: list[list[int]], new_tokens: int) -> Generation:
    """One generation of ``new_tokens`` tokens per sequence (``new_tokens`` 1: the prefill alone)."""
    batch = len(prompts)
    clock = time.perf_counter
    if not has_steps(backend):
        t0 = clock()
        whole = backend.generate(prompts, new_tokens)
        t1 = clock()
        if [len(t) for t in whole] != [new_tokens] * batch:
            raise TokenCountError(f"generate returned {[len(t) for t in whole]} tokens per sequence for a batch "
                                  f"of {batch} x {new_tokens}")
        return Generation(float("nan"), (), (), t1 - t0, tuple(tuple(t) for t in whole), steps=False)
    t0 = clock()
    step = backend.prefill(prompts)
    t1 = clock()
    _check(step, batch, "prefill")
    seqs = [[tok] for tok in step.tokens]
    steps: list[float] = []
    itl: list[float] = []
    last = t1
    for _ in range(new_tokens - 1):
        a = clock()
        step = backend.decode(step.state)
        b = clock()
        steps.append(b - a)
        itl.append(b - last)
        last = b
        _check(step, batch, "decode")
        for seq, tok in zip(seqs, step.tokens, strict=False):
            seq.append(tok)
    backend.release(step.state)
    return Generation(t1 - t0, tuple(steps), tuple(itl), last - t0, tuple(tuple(s) for s in seqs))


def measure_generations(backend: Backend, prompts: list[list[int]], new_tokens: int, generations: int, warmup: int,
            wanted: Sequence[str] = TIMED, turn: Callable[[], None] | None = None) -> dict[str, Measurement]:
    """``warmup`` untimed then ``generations`` timed generations -> one Measurement per wanted test. ``turn``
    (perfsuite.measure.lockstep.Gate.turn) is called before each generation and once after the last, outside every timed
    interval: it waits for this process's turn in a lockstep pair."""
    unknown = sorted(set(wanted) - set(TIMED))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}: expected some of {list(TIMED)}")
    length = new_tokens if set(wanted) - {"ttft"} else 1
    wait = turn or (lambda: None)
    gens = []
    for _ in range(warmup + generations):
        wait()
        gens.append(generate(backend, prompts, length))
    wait()
    timed = gens[warmup:]
    outputs = metrics.outputs_record([g.tokens for g in timed])
    return {m: dataclasses.replace(cut(m, timed, len(prompts), new_tokens), outputs=outputs) for m in wanted}


def cut(metric: str, gens: Sequence[Generation], batch: int, new_tokens: int) -> Measurement:
    """One test's rounds and samples from the timed generations."""
    ms = lambda xs: [x * 1e3 for x in xs]  # noqa: E731
    if not all(g.steps for g in gens):
        if metric != "e2el":
            raise ValueError(f"whole-generation timings have no {metric} rounds (only e2el)")
        return Measurement("e2el", {"e2el_ms": ms(g.e2el_s for g in gens)}, generated_tokens=batch * len(gens) *
                           new_tokens, tokens=[list(s) for s in gens[-1].tokens], rounds_s=[g.e2el_s for g in gens])
    if metric == "ttft":
        return Measurement("ttft", {"ttft_ms": ms(g.ttft_s for g in gens)}, generated_tokens=batch * len(gens),
                           tokens=[[s[0]] for s in gens[-1].tokens], rounds_s=[g.ttft_s for g in gens])
    steps = new_tokens - 1
    if any(len(g.step_s) != steps for g in gens):
        raise TokenCountError(f"expected {len(gens)} generations of {new_tokens} tokens per sequence")
    last = [list(s) for s in gens[-1].tokens]
    if metric == "tpot":
        rounds = [x for g in gens for x in g.step_s]
        return Measurement("tpot", {"itl_ms": ms(rounds), "tpot_ms": [sum(g.step_s) / steps * 1e3 for g in gens]},
                           generated_tokens=batch * len(gens) * steps, tokens=last, rounds_s=rounds)
    e2el, ttft = ms(g.e2el_s for g in gens), ms(g.ttft_s for g in gens)
    return Measurement("e2el", {"ttft_ms": ttft, "tpot_ms": [metrics.tpot_ms(e, f, new_tokens)
                                                            for e, f in zip(e2el, ttft, strict=True)],
                                "itl_ms": ms(x for g in gens for x in g.itl_s), "e2el_ms": e2el},
                       generated_tokens=batch * len(gens) * new_tokens, tokens=last, rounds_s=[g.e2el_s for g in gens])
