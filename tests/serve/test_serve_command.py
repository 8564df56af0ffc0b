"""`perfsuite serve --base-url` against the stub server on loopback; datasets, tokenizer and /metrics cross-check."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator

import pytest
from serve_stub import Stub

from perfsuite.cli import main
from perfsuite.measure.serving import datasets, promcheck, tokenizer
from perfsuite.measure.serving.load import LoadSpec, run_load
from perfsuite.measure.serving.point import point_from, run_point


def test_by_url_writes_the_json(tmp_path, capsys):
    out = tmp_path / "serve.json"
    with Stub(ttft_s=0.01, itl_s=0.005) as stub:
        rc = main(["serve", "--base-url", stub.base_url, "--load", "poisson:20", "--load", "closed:2",
                   "--num-prompts", "6", "--warmup", "1", "--output-len", "4", "--goodput", "ttft:500", "tpot:100",
                   "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "perfsuite-serve/1" and data["model"] == "stub"  # from /v1/models
    assert [p["point"]["slug"] for p in data["points"]] == ["random-i64-o4-poisson-r20-n6",
                                                            "random-i64-o4-closed-c2-n6"]
    m = data["points"][0]["metrics"]
    for k in ("request_throughput", "output_throughput", "total_token_throughput", "request_goodput",
              "median_ttft_ms", "p99_tpot_ms", "mean_itl_ms", "p90_e2el_ms", "completed", "failed",
              "p99_dispatch_delay_ms", "client_cpu_share"):
        assert k in m
    assert m["completed"] == 6 and len(data["points"][0]["records"]) == 6
    assert data["points"][0]["prometheus"]["ttft"]["count"] == 6  # the stub's histogram, warm-up excluded
    assert "poisson-r20" in capsys.readouterr().err


def test_failed_requests_over_the_threshold_fail_the_command(tmp_path, capsys):
    with Stub(ttft_s=0.002, itl_s=0.002, fail_every=3) as stub:
        args = ["serve", "--base-url", stub.base_url, "--load", "poisson:50", "--num-prompts", "9", "--warmup", "0",
                "--output-len", "2", "--json", str(tmp_path / "a.json")]
        assert main(args) == 1
        assert "3 of 9 requests failed" in capsys.readouterr().err
        assert main([*args, "--max-failed-fraction", "0.4"]) == 0


@pytest.mark.parametrize("args,msg", [
    (["--base-url", "http://10.1.2.3:8000"], "is not loopback"),
    (["--base-url", "ftp://127.0.0.1"], "not an http(s) URL"),
    (["--base-url", "http://127.0.0.1:1", "--load", "uniform:3"], "load point 'uniform:3'"),
    (["--base-url", "http://127.0.0.1:1", "--goodput", "ttft:x"], "goodput SLO"),
    (["--base-url", "http://127.0.0.1:1", "--dataset", "pile"], "dataset 'pile'"),
    (["--base-url", "http://127.0.0.1:1", "--max-failed-fraction", "1.5"], "--max-failed-fraction"),
])
def test_usage_errors_are_one_line_exit_2(args, msg, capsys):
    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_no_server_is_a_usage_error(capsys):
    from perfsuite.measure.serving.server import free_port

    port = free_port()
    assert main(["serve", "--base-url", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"nothing answers at http://127.0.0.1:{port}" in err and "start the server first" in err
    assert err.count("\n") == 1


@contextlib.contextmanager
def html_server() -> Iterator[str]:
    """A loopback HTTP server that is not an OpenAI server: every GET is an HTML page, every POST a 501 page."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!DOCTYPE html><html><body><h1>Directory listing</h1></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.send_error(501, "Unsupported method ('POST')")

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()


def test_a_server_that_is_not_openai_is_named_not_dumped(tmp_path, capsys):
    with html_server() as url:
        assert main(["serve", "--base-url", url]) == 2  # no --model: /v1/models is an HTML page
        err = capsys.readouterr().err
        assert f"{url}/v1/models answered an HTML page, not an OpenAI model list" in err
        assert "OpenAI-compatible server" in err and err.count("\n") == 1
        # with --model the requests fail: one line per failure kind, no HTML, no latency figures of nothing
        assert main(["serve", "--base-url", url, "--model", "m", "--num-prompts", "3", "--warmup", "0",
                     "--json", str(tmp_path / "s.json")]) == 1
        err = capsys.readouterr().err
    assert "0/3 ok, no request completed: HTTP 501 with an HTML page" in err
    assert "3 of 3 requests failed" in err and "<" not in err and "TTFT" not in err


def test_word_tokenizer_round_trips_ids(tmp_path):
    from tokenizers import Tokenizer

    tokenizer.build(tmp_path, 300)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ids = [4, 17, 299, 5]
    assert tok.encode(tokenizer.text_of(ids), add_special_tokens=False).ids == ids
    assert tok.token_to_id("</s>") == 2 and tok.token_to_id("<s>") == 1


def test_serving_dir_links_the_model_and_adds_the_tokenizer(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 64}))
    (model / "model.safetensors").write_bytes(b"x")
    d = tokenizer.serving_dir(model, tmp_path / "cache", "m-abc")
    assert (d / "tokenizer.json").is_file() and (d / "model.safetensors").resolve() == model / "model.safetensors"
    assert tokenizer.serving_dir(model, tmp_path / "cache", "m-abc") == d


def test_datasets_are_seeded_with_exact_lengths(tmp_path):
    a = datasets.random_requests(5, 10, 3, 100, seed=1)
    assert a == datasets.random_requests(5, 10, 3, 100, seed=1) != datasets.random_requests(5, 10, 3, 100, seed=2)
    assert all(len(r.prompt) == r.prompt_len == 10 and min(r.prompt) >= 4 and max(r.prompt) < 100 for r in a)
    sp = datasets.shared_prefix_requests(8, 20, 5, 4, 100, groups=2)
    assert sp[0].prompt[:20] == sp[2].prompt[:20] != sp[1].prompt[:20] and sp[0].prompt[20:] != sp[2].prompt[20:]
    path = datasets.write_sharegpt(tmp_path / "sg.json", 50, 100, seed=0)
    body = path.read_bytes()
    assert datasets.write_sharegpt(tmp_path / "sg.json", 50, 100, seed=0).read_bytes() == body
    conv = json.loads(body)[0]["conversations"]
    assert conv[0]["from"] == "human" and conv[1]["from"] == "gpt"
    reqs = datasets.sharegpt_requests(path, 10, seed=0)
    assert all(r.prompt_len == len(str(r.prompt).split()) >= 4 and r.output_len >= 4 for r in reqs)
    with pytest.raises(ValueError, match="usable conversations"):
        datasets.sharegpt_requests(path, 10_000)


def test_sharegpt_and_shared_prefix_points_run(tmp_path):
    with Stub(ttft_s=0.002, itl_s=0.002) as stub:
        for table in ({"dataset": "sharegpt", "output_len": 3}, {"dataset": "shared-prefix", "prefix_len": 16}):
            p = point_from({"load": "poisson:100", "num_prompts": 4, "warmup": 0, **table})
            r = run_point(stub.base_url, "stub", p, vocab_size=2048, cache_dir=tmp_path)
            assert r["metrics"]["completed"] == 4 and not r["failure"]
        assert isinstance(stub.bodies[0]["prompt"], str) and isinstance(stub.bodies[-1]["prompt"], list)


def test_prometheus_cross_check_against_the_stub_histograms():
    reqs = datasets.random_requests(8, 4, 4, 2048)
    with Stub(ttft_s=0.03, itl_s=0.01) as stub:
        run_load(stub.base_url, "stub", reqs[:2], LoadSpec("poisson", rate=100, num_requests=2, warmup=0))
        before = promcheck.snapshot(stub.base_url)
        res = run_load(stub.base_url, "stub", reqs, LoadSpec("poisson", rate=50, num_requests=8, warmup=0))
        after = promcheck.snapshot(stub.base_url)
    from perfsuite.measure.serving import metrics

    m = metrics.compute(res)
    cmp = promcheck.compare(before, after, m)
    assert cmp["ttft"]["count"] == 8 and cmp["itl"]["count"] == 8 * 3  # the 2 earlier requests are excluded
    assert 30 <= cmp["ttft"]["server_mean_ms"] <= m["mean_ttft_ms"]  # the client's TTFT includes the HTTP hops
    # interpolated inside the bucket that holds the server's median (10 ms wide here), which the client's exceeds
    assert 30 <= cmp["ttft"]["server_median_ms"] <= m["median_ttft_ms"] + 10
    assert promcheck.compare(None, after, m) == {"available": False}


def test_histogram_quantile_interpolates_like_prometheus():
    h = promcheck.Hist(((0.1, 2.0), (0.2, 6.0), (float("inf"), 8.0)), 1.0, 8.0)
    assert h.quantile(0.5) == pytest.approx(0.15)  # rank 4: halfway through the 0.1-0.2 bucket
    assert h.quantile(0.99) == pytest.approx(0.2)  # in +Inf: the last finite bound
    assert h.mean() == pytest.approx(0.125)


def test_sweep_stops_at_saturation_and_reports_the_knee(tmp_path):
    # capacity: 1 request in flight, ~30 ms each -> ~30 req/s; 2 and 4 keep up (with 0.2 s to spare), 80 cannot
    out = tmp_path / "sweep.json"
    with Stub(ttft_s=0.01, itl_s=0.01, max_inflight=1) as stub:
        rc = main(["serve", "--base-url", stub.base_url, "--load", "poisson:1", "--sweep", "2,4,80,160",
                   "--num-prompts", "8", "--warmup", "0", "--output-len", "3", "--json", str(out)])
    assert rc == 0
    sw = json.loads(out.read_text())["sweep"]
    assert sw["knee_rate"] == 4.0 and sw["stopped"].startswith("at 80 req/s")
    assert len(json.loads(out.read_text())["points"]) == 3  # stopped: 160 never ran


def test_saturation_rules():
    from perfsuite.measure.serving.sweep import parse_rates, saturated

    assert saturated({"request_throughput": 3.9}, 4, {"request_throughput": 2.0}) is None
    assert "fell behind" in saturated({"request_throughput": 3.0}, 4, None)
    assert "no longer rises" in saturated({"request_throughput": 4.0}, 4.1, {"request_throughput": 3.9})
    assert "SLO broke" in saturated({"request_throughput": 4.0, "request_goodput": 2.0}, 4, None)
    assert parse_rates("1,2,4") == [1.0, 2.0, 4.0]
    for bad in ("4,2", "1,x", "0,1", ""):
        with pytest.raises(ValueError, match="rising request rates"):
            parse_rates(bad)
