"""perfsuite's serving client vs ``vllm bench serve`` on the SAME running vLLM server with the same load (rate,
seed, lengths, ignore_eos), interleaved ABBA (pair k runs ours first when k is even, vLLM's first when odd:
:func:`order`) so that drift of a shared machine and a run's position in its pair fall on both; plus the client's own
figures (dispatch delay, CPU share) and client TTFT vs the server's histogram. Writes a JSON and prints the table
for docs/serving.md.

    python benchmarks/serve_agreement.py --load poisson:2 --load poisson:4 --num-prompts 64 --pairs 3 \\
        --json benchmarks/data/serve_agreement.json
    # pooled within-pair ratios of several --wire runs (each client and the loopback)
    python benchmarks/serve_agreement.py pool benchmarks/data/serve_agreement_same_schedule_20261205.json ...
    # the two clients alone: a stub server (tests/serve/fake_server.py) streaming with fixed delays
    python benchmarks/serve_agreement.py --stub 0.03 0.01 --load poisson:4 --json benchmarks/data/serve_agreement_stub.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from scipy import stats as st

from perfsuite.measure.serving import promcheck, wirecap
from perfsuite.measure.serving.cell import started_server
from perfsuite.measure.serving.load import parse_load
from perfsuite.measure.serving.point import point_from, run_point
from perfsuite.measure.serving.server import Server, free_port, server_cpus

VLLM_BENCH = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
              "from vllm.utils.argparse_utils import FlexibleArgumentParser; p = FlexibleArgumentParser(); "
              "add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
KEYS = ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "request_throughput", "mean_ttft_ms", "mean_tpot_ms",
        "mean_itl_ms", "output_throughput")


def _wire(cap: wirecap.Capture | None, n: int, out_len: int) -> dict:
    """The loopback's view of one run: the median TTFT of its ``n`` timed requests (the last ``n`` to start) and their
    median TPOT, first to last token over ``out_len - 1`` (every request has ``out_len`` tokens: ignore_eos)."""
    if cap is None:
        return {}
    got, spans, gaps = cap.timed(n), cap.decode_spans(n), cap.gaps(n)
    tpot = 1e3 * float(np.median(spans)) / (out_len - 1) if spans and out_len > 1 else None
    return {"wire_median_ttft_ms": 1e3 * float(np.median(got)) if got else None, "wire_requests": len(got),
            "wire_median_tpot_ms": tpot, "wire_median_itl_ms": 1e3 * float(np.median(gaps)) if gaps else None,
            "wire_gaps": len(gaps)}


def _server(prom: dict) -> dict:
    """The server's own histograms over one run: mean (exact) and count per metric."""
    return {k: {"server_mean_ms": v.get("server_mean_ms"), "count": v.get("count")}
            for k, v in (prom or {}).items() if isinstance(v, dict)}


def order(k: int) -> tuple[str, str]:
    """ABBA: pair k's order. Over every two pairs each client runs first once, so a steady drift or a cost of
    running first (or second) cancels from the medians instead of always falling on one client."""
    return ("perfsuite", "vllm") if k % 2 == 0 else ("vllm", "perfsuite")


def vllm_bench(base_url: str, model: str, tokenizer: Path, load: str, n: int, warmup: int, in_len: int,
               out_len: int, seed: int, out: Path) -> dict:
    spec = parse_load(load)
    # --temperature 0: greedy, as perfsuite's client asks (payload "temperature": 0.0). Without it vllm bench serve
    # (since 0.1x) sends no temperature, the server samples at its default 1.0, and each step does the random-sampling
    # work greedy decoding skips: a different workload, read as a TTFT 4-5 % higher than ours in the first series.
    argv = [sys.executable, "-c", VLLM_BENCH, "--backend", "openai", "--base-url", base_url, "--endpoint",
            "/v1/completions", "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", str(in_len), "--random-output-len", str(out_len), "--random-range-ratio", "0",
            "--ignore-eos", "--temperature", "0", "--num-prompts", str(n), "--request-rate", str(spec.rate), "--burstiness",
            str(spec.burstiness), "--seed", str(seed), "--num-warmups", str(warmup), "--percentile-metrics",
            "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--save-result", "--result-dir",
            str(out.parent), "--result-filename", out.name, "--disable-tqdm"]
    if spec.max_concurrency:
        argv += ["--max-concurrency", str(spec.max_concurrency)]
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=900)
    return json.loads(out.read_text())


@contextlib.contextmanager
def serving(a: argparse.Namespace, tmp: Path) -> Iterator[tuple[Server, str, int, Path, Path]]:
    if not a.stub:
        with started_server(a.model, log_dir=tmp) as (srv, name, vocab, cache):
            yield srv, name, vocab, cache, Path(srv.argv[srv.argv.index("--model") + 1])
        return
    from perfsuite.facts import models
    from perfsuite.measure.serving import tokenizer

    fake = Path(__file__).parents[1] / "tests" / "serve" / "fake_server.py"
    port = free_port()
    cache = models.default_cache_dir()
    tok = tmp / "tokenizer"
    tok.mkdir()
    tokenizer.build(tok, 2048)  # vllm bench serve's random dataset needs one; the stub ignores the prompt
    with Server([sys.executable, str(fake), str(port), "ok", *map(str, a.stub)], port=port,
                log_path=tmp / "stub.log", name="stub server") as srv:
        yield srv, "stub", 2048, cache, tok


def paired_ratio(ours: list[float], theirs: list[float]) -> dict:
    """Ours over vLLM's within each ABBA pair, as a geometric mean with a 95 % t interval over the pairs: the two
    runs of a pair are adjacent in time, so the server's slow drift between pairs cancels, which the ratio of the
    two clients' medians over all runs does not do."""
    d = np.log(np.asarray(ours, dtype=float)) - np.log(np.asarray(theirs, dtype=float))
    if d.size < 2 or not np.all(np.isfinite(d)):
        return {"pairs": int(d.size), "ratio": float(np.exp(d.mean())) if d.size else None, "ci95": None}
    half = float(st.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size))
    return {"pairs": int(d.size), "ratio": float(np.exp(d.mean())),
            "ci95": [float(np.exp(d.mean() - half)), float(np.exp(d.mean() + half))]}


def pooled(files: list[Path]) -> dict:
    """Within-pair ratios over the pairs of several ``--wire`` runs' JSON, per load point: each client over the other
    (its readings), the loopback of our runs over that of vLLM's (the server's own pace in the two clients' runs),
    and each client over the loopback of its own run (what the client adds), whose ratio between the clients is
    their agreement on the same traffic."""
    out: dict = {}
    for f in files:
        for load, p in json.loads(f.read_text())["points"].items():
            acc = out.setdefault(load, {"ours": [], "theirs": []})
            acc["ours"] += p["perfsuite"]
            acc["theirs"] += p["vllm_bench_serve"]
    res: dict = {}
    for load, acc in out.items():
        o, t = acc["ours"], acc["theirs"]
        r: dict = {"pairs": len(o)}
        for x in ("ttft", "tpot", "itl"):
            c, w = f"median_{x}_ms", f"wire_median_{x}_ms"
            r[c] = paired_ratio([d[c] for d in o], [d[c] for d in t])
            both = [(a, b) for a, b in zip(o, t, strict=True) if a.get(w) and b.get(w)]
            ow, tw = [a for a, _ in both], [b for _, b in both]
            if both:  # the pairs whose runs were timed on the loopback (ITL there since series 2 of 2026-12-05)
                r[w] = paired_ratio([d[w] for d in ow], [d[w] for d in tw])
                r[f"{x}_client_over_wire"] = {
                    "perfsuite": paired_ratio([d[c] for d in ow], [d[w] for d in ow]),
                    "vllm_bench_serve": paired_ratio([d[c] for d in tw], [d[w] for d in tw]),
                    "ours_over_theirs": paired_ratio([d[c] / d[w] for d in ow], [d[c] / d[w] for d in tw])}
        r["request_throughput"] = paired_ratio([d["request_throughput"] for d in o],
                                               [d["request_throughput"] for d in t])
        res[load] = r
    return res


def main() -> int:
    if sys.argv[1:2] == ["pool"]:  # python benchmarks/serve_agreement.py pool A.json B.json ...
        print(json.dumps(pooled([Path(f) for f in sys.argv[2:]]), indent=1))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--load", action="append", default=None)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seed-base", type=int, default=0,
                    help="pair k runs seed SEED_BASE + k on both clients (one seed, one arrival schedule in both)")
    ap.add_argument("--prompt", choices=("ids", "text"), default="ids",
                    help="our client's prompts: token ids (the cells' default) or the same tokens as text, as vLLM's")
    ap.add_argument("--server-warmup", type=int, default=1,
                    help="unrecorded runs of our client at each load point before the pairs (the first run after the "
                         "server's start reads slower: docs/serving.md, 2026-12-05)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--stub", nargs=2, type=float, metavar=("TTFT_S", "ITL_S"),
                    help="measure against the stub server streaming with these delays instead of vLLM's")
    ap.add_argument("--wire", action="store_true",
                    help="also time each run's TTFT on the loopback (perfsuite.measure.serving.wirecap; needs CAP_NET_RAW)")
    ap.add_argument("--no-pin-clients", dest="pin_clients", action="store_false",
                    help="leave both clients where the kernel puts them (default: both on the cores the server does "
                         "not have, perfsuite.measure.serving.server.server_cpus)")
    a = ap.parse_args()
    if a.wire and (why := wirecap.available()):
        ap.error(f"--wire: {why}")
    tmp = Path(tempfile.mkdtemp(prefix="perfsuite-agree-"))
    out: dict = {"points": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with serving(a, tmp) as (srv, name, vocab, cache, folder):
        out["server_start_s"] = srv.start_s
        free = sorted(set(os.sched_getaffinity(0)) - set(server_cpus() or []))
        if a.pin_clients and free and not a.stub:
            # the same cores for both clients (vLLM's runs in a child, which inherits this): neither competes with
            # the server for its core, and neither is given one the other lacks
            os.sched_setaffinity(0, free)
        out["client_cpus"] = sorted(os.sched_getaffinity(0))
        out["server"] = "stub" if a.stub else a.model
        out["our_prompts"] = a.prompt
        out["args"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}
        for load in a.load or ["poisson:2", "poisson:4"]:
            ours, theirs = [], []
            for w in range(a.server_warmup):  # not recorded: the server's first run after its start reads slower
                pt = point_from({"load": load, "num_prompts": a.num_prompts, "warmup": a.warmup, "seed": 1000 + w,
                                 "input_len": a.input_len, "output_len": a.output_len, "prompt": a.prompt})
                r = run_point(srv.base_url, name, pt, vocab_size=vocab, cache_dir=cache, abort=srv.abort_reason)
                print(f"{load} server warm-up run {w} (not recorded): median TTFT "
                      f"{r['metrics']['median_ttft_ms']:.3f} ms", flush=True)
            for k in range(a.pairs):
                seed = a.seed_base + k
                pt = point_from({"load": load, "num_prompts": a.num_prompts, "warmup": a.warmup, "seed": seed,
                                 "input_len": a.input_len, "output_len": a.output_len, "prompt": a.prompt})
                for who in order(k):
                    wire = wirecap.capture(srv.port) if a.wire else contextlib.nullcontext(None)
                    if who == "perfsuite":
                        with wire as cap:
                            r = run_point(srv.base_url, name, pt, vocab_size=vocab, cache_dir=cache,
                                          abort=srv.abort_reason)
                        m = r["metrics"]
                        ours.append({**{x: m[x] for x in KEYS}, "p99_dispatch_delay_ms": m["p99_dispatch_delay_ms"],
                                     "max_dispatch_delay_ms": m["max_dispatch_delay_ms"],
                                     "client_cpu_share": m["client_cpu_share"], "failed": m["failed"],
                                     "prometheus_ttft": r["prometheus"].get("ttft"), "first": who == order(k)[0],
                                     "server": _server(r["prometheus"]), "seed": seed,
                                     **_wire(cap, a.num_prompts, a.output_len)})
                    else:
                        before = promcheck.snapshot(srv.base_url)
                        with wire as cap:
                            v = vllm_bench(srv.base_url, name, folder, load, a.num_prompts, a.warmup, a.input_len,
                                           a.output_len, seed, tmp / f"vllm-{load.replace(':', '-')}-{k}.json")
                        # the server's view of vLLM's run: its warm-ups are inside this delta (count says so)
                        prom = promcheck.compare(before, promcheck.snapshot(srv.base_url), v)
                        theirs.append({x: v[x] for x in KEYS} | {"failed": v.get("failed"), "first": who == order(k)[0],
                                                                 "prometheus_ttft": prom.get("ttft"),
                                                                 "server": _server(prom), "seed": seed,
                                                                 **_wire(cap, a.num_prompts, a.output_len)})
                print(f"{load} pair {k} ({'/'.join(order(k))}): ours {[round(ours[-1][x], 3) for x in KEYS[:4]]} vllm "
                      f"{[round(theirs[-1][x], 3) for x in KEYS[:4]]}", flush=True)
            summary = {}
            for x in KEYS:
                o, t = float(np.median([d[x] for d in ours])), float(np.median([d[x] for d in theirs]))
                summary[x] = {"perfsuite": o, "vllm_bench_serve": t, "rel_diff": (o - t) / t if t else None}
            summary["paired"] = {x: paired_ratio([o[x] for o in ours], [t[x] for t in theirs]) for x in KEYS[:4]}
            if a.wire:  # the server's own pace on the loopback, our runs over vLLM's, within pairs
                summary["paired"].update({x: paired_ratio([o[x] for o in ours], [t[x] for t in theirs])
                                          for x in ("wire_median_ttft_ms", "wire_median_tpot_ms", "wire_median_itl_ms")})
            summary["server_mean_ttft_ms"], summary["ttft_outside_server_ms"] = {}, {}
            for who, runs in (("perfsuite", ours), ("vllm_bench_serve", theirs)):
                seen = [(d["mean_ttft_ms"], d["prometheus_ttft"]["server_mean_ms"]) for d in runs
                        if (d.get("prometheus_ttft") or {}).get("server_mean_ms") is not None]
                # the server's mean TTFT of each run, and the client's mean minus it: the time outside vLLM's clock
                summary["server_mean_ttft_ms"][who] = float(np.median([s for _, s in seen])) if seen else None
                summary["ttft_outside_server_ms"][who] = float(np.median([c - s for c, s in seen])) if seen else None
            if a.wire:  # each client's median TTFT minus the loopback's median TTFT of the same run
                summary["wire_median_ttft_ms"] = {w: float(np.median([d["wire_median_ttft_ms"] for d in runs]))
                                                  for w, runs in (("perfsuite", ours), ("vllm_bench_serve", theirs))}
                summary["ttft_over_wire_ms"] = {w: float(np.median([d["median_ttft_ms"] - d["wire_median_ttft_ms"]
                                                                    for d in runs]))
                                                for w, runs in (("perfsuite", ours), ("vllm_bench_serve", theirs))}
                for x in ("tpot", "itl"):
                    summary[f"{x}_over_wire_ms"] = {
                        w: float(np.median([d[f"median_{x}_ms"] - d[f"wire_median_{x}_ms"] for d in runs]))
                        for w, runs in (("perfsuite", ours), ("vllm_bench_serve", theirs))}
            summary["p99_dispatch_delay_ms"] = max(d["p99_dispatch_delay_ms"] for d in ours)
            summary["client_cpu_share"] = max(d["client_cpu_share"] for d in ours)
            out["points"][load] = {"summary": summary, "perfsuite": ours, "vllm_bench_serve": theirs}
        out["leftover_after_stop"] = None
    out["leftover_after_stop"] = srv.leftover()
    shutil.rmtree(tmp, ignore_errors=True)  # vLLM's result files and logs; a failed run keeps them (traceback names)
    text = json.dumps(out, indent=1, default=str)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(text)
    for load, p in out["points"].items():
        s = p["summary"]
        print(f"| {load} | " + " | ".join(f"{s[x]['perfsuite']:.3f} / {s[x]['vllm_bench_serve']:.3f} "
                                           f"({100 * s[x]['rel_diff']:+.1f} %)" for x in KEYS[:4])
              + f" | {s['p99_dispatch_delay_ms']:.2f} | {s['client_cpu_share']:.1%} |")
    for load, p in out["points"].items():
        s = p["summary"]
        print(f"{load}: server mean TTFT (ours / vLLM's runs) {s['server_mean_ttft_ms']}; client minus server "
              f"{s['ttft_outside_server_ms']}")
        if a.wire:
            print(f"{load}: loopback median TTFT (ours / vLLM's runs) {s['wire_median_ttft_ms']}; client median minus "
                  f"loopback median {s['ttft_over_wire_ms']}; TPOT client median minus loopback median "
                  f"{s['tpot_over_wire_ms']}; ITL {s['itl_over_wire_ms']}")
    for load, p in out["points"].items():
        print(f"{load}: ours / vLLM's within pairs (geometric mean, 95 % CI over pairs): " + "; ".join(
            f"{x} {v['ratio']:.3f} [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}]" if v["ci95"] else f"{x} {v['ratio']}"
            for x, v in p["summary"]["paired"].items()))
    print("leftover processes after stop:", out["leftover_after_stop"])
    return 0


if __name__ == "__main__":
    from perfsuite.machine.signals import stoppable  # kill -INT / -TERM end it with its server and clients

    with stoppable():
        sys.exit(main())
