"""``perfsuite serve``: load points against a running OpenAI-compatible server (vLLM, SGLang, ... at ``--base-url``)
or one it starts itself (``--start MODEL``: vLLM's server with a perfsuite model), writing one JSON (docs/serving.md:
examples, ``vllm bench serve``'s metric names). A point whose failed requests exceed ``--max-failed-fraction`` fails
the command (exit 1): a broken run is never a result."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, measuring, usage_errors
from perfsuite.facts.errors import UsageError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(sub: Any) -> None:
    p = add_command(sub, "serve", "serving load points (arrival rate / concurrency) against an OpenAI-compatible "
                    "server; vllm-bench-serve metrics as JSON", None, main)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="a running server, e.g. http://127.0.0.1:8000 (loopback only unless "
                                          "--allow-remote)")
    where.add_argument("--start", metavar="MODEL", help="start vLLM's server with this perfsuite model (a preset or a "
                                                        "checkpoint dir) on a free loopback port, stop it at the end")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --base-url that is not loopback (the load then leaves this machine)")
    p.add_argument("--model", help="model name the server serves (default: the first of /v1/models)")
    p.add_argument("--load", action="append", default=None, metavar="SPEC",
                   help="load point, repeatable: poisson:RATE, constant:RATE, gamma:RATE:BURSTINESS, closed:USERS, "
                        "optional @MAX_CONCURRENCY (default poisson:4)")
    p.add_argument("--sweep", metavar="RATES", help="rate sweep to saturation instead of --load points: rising rates "
                   "(e.g. 1,2,4,8) of the first --load's arrival process; reports the knee (docs/serving.md)")
    p.add_argument("--num-prompts", type=int, default=32, help="timed requests per point (default 32)")
    p.add_argument("--warmup", type=int, default=2, help="untimed requests before each point (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset", default="random", help="random | sharegpt | shared-prefix (default random)")
    p.add_argument("--input-len", type=int, default=64, help="prompt tokens (shared-prefix: the suffix)")
    p.add_argument("--output-len", type=int, default=16, help="output tokens (ignore_eos); sharegpt: 0 = the answer's")
    p.add_argument("--prefix-len", type=int, default=0, help="shared-prefix: tokens of the common prefix")
    p.add_argument("--prefix-groups", type=int, default=4, help="shared-prefix: distinct prefixes (default 4)")
    p.add_argument("--sharegpt", help="a ShareGPT-format JSON (default: a small one generated into the cache)")
    p.add_argument("--vocab-size", type=int, default=2048,
                   help="token ids of random prompts are drawn below this (default 2048: valid for any model)")
    p.add_argument("--goodput", nargs="*", default=None, metavar="NAME:MS", help="SLOs, e.g. ttft:500 tpot:100")
    p.add_argument("--max-failed-fraction", type=float, default=0.0,
                   help="a point with more failed requests fails (default 0: any failure fails)")
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds (default 600)")
    p.add_argument("--start-timeout", type=float, default=900.0, help="--start: seconds to wait for health")
    p.add_argument("--json", type=Path, help="write the result JSON here (default: stdout)")


def check_url(url: str, allow_remote: bool) -> str:
    u = urllib.parse.urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UsageError(f"--base-url {url!r} is not an http(s) URL; write e.g. http://127.0.0.1:8000")
    if u.hostname not in LOOPBACK and not allow_remote:
        raise UsageError(f"--base-url {url!r} is not loopback; run perfsuite serve on the server's machine, or pass "
                         "--allow-remote to send the load over the network")
    return url.rstrip("/")


def served_model(base_url: str) -> str:
    from perfsuite.measure.serving.server import http_get

    url = base_url + "/v1/models"
    try:
        status, body = http_get(url, timeout_s=10)
    except OSError as exc:
        raise UsageError(f"nothing answers at {base_url} ({getattr(exc, 'reason', exc)}); start the server first, "
                         "or check --base-url") from None
    not_openai = "is this an OpenAI-compatible server (vLLM: python -m vllm.entrypoints.openai.api_server)?"
    if status != 200:
        raise UsageError(f"{url} answered HTTP {status}: {not_openai} Or pass --model NAME")
    try:
        ids = [str(m["id"]) for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        what = "an HTML page" if body.lstrip().startswith("<") else f"{' '.join(body.split())[:60]!r}"
        raise UsageError(f"{url} answered {what}, not an OpenAI model list: {not_openai}") from None
    if not ids:
        raise UsageError(f"{url} lists no model (the server is up but serves none yet?); pass --model NAME")
    return ids[0]


def points(args: argparse.Namespace) -> list[Any]:
    from perfsuite.measure.serving.point import point_from

    table = {"num_prompts": args.num_prompts, "warmup": args.warmup, "seed": args.seed, "dataset": args.dataset,
             "input_len": args.input_len, "output_len": args.output_len, "prefix_len": args.prefix_len,
             "prefix_groups": args.prefix_groups}
    if args.sharegpt:
        table["sharegpt_path"] = args.sharegpt
    with usage_errors(ValueError):
        return [point_from({"load": spec, **table}, "--load") for spec in args.load or ["poisson:4"]]


def main(args: argparse.Namespace) -> int:
    from perfsuite.measure.serving import metrics

    if args.num_prompts < 1 or args.warmup < 0:
        raise UsageError("--num-prompts must be >= 1 and --warmup >= 0")
    if not 0 <= args.max_failed_fraction < 1:
        raise UsageError(f"--max-failed-fraction {args.max_failed_fraction}: use a fraction from 0 to below 1")
    with usage_errors(ValueError):
        slos = metrics.parse_goodput(args.goodput) if args.goodput else None
    pts = points(args)
    url = None if args.start else check_url(args.base_url, args.allow_remote)
    with measuring("serve"):  # one perfsuite run measures at a time (the load generator times here)
        if url is None:
            from perfsuite.measure.serving.cell import started_server

            with started_server(args.start, start_timeout_s=args.start_timeout, keep_logs=True) as started:
                srv, name, vocab, cache = started
                result = run(srv.base_url, args.model or name, pts, args, slos, min(vocab, args.vocab_size), cache,
                             abort=srv.abort_reason, client_cpus=srv.client_cpus)
                result["server"] = {"model": args.start, "start_s": srv.start_s, "log": str(srv.log_path)}
        else:
            from perfsuite.facts.models import default_cache_dir

            result = run(url, args.model or served_model(url), pts, args, slos, args.vocab_size, default_cache_dir())
    text = json.dumps(result, indent=1, default=str)
    if args.json:
        args.json.write_text(text)
    else:
        print(text)
    failed = [p for p in result["points"] if p["failure"]]
    for p in failed:
        print(f"perfsuite serve: {p['point']['slug']} failed: {p['failure']}", file=sys.stderr)
    return 1 if failed else 0


def run(base_url: str, model: str, pts: list[Any], args: argparse.Namespace, slos: dict[str, float] | None,
        vocab: int, cache: Path, abort: Any = None, client_cpus: list[int] | None = None) -> dict[str, Any]:
    from perfsuite.measure.serving.cell import summary
    from perfsuite.measure.serving.point import SCHEMA, run_point

    def one(p: Any) -> dict[str, Any]:
        r = run_point(base_url, model, p, vocab_size=vocab, cache_dir=cache, slos_ms=slos,
                      max_failed_fraction=args.max_failed_fraction, abort=abort, timeout_s=args.timeout,
                      client_cpus=client_cpus)
        print(summary(r), file=sys.stderr)
        return r

    out: dict[str, Any] = {"schema": SCHEMA, "base_url": base_url, "model": model, "points": []}
    if not args.sweep:
        out["points"] = [one(p) for p in pts]
        return out
    from dataclasses import replace

    from perfsuite.measure.serving.sweep import parse_rates, sweep

    with usage_errors(ValueError):
        rates = parse_rates(args.sweep)
    if pts[0].load.mode == "closed":
        raise UsageError("--sweep takes an open-loop --load (poisson, constant or gamma), not closed")
    sw = sweep(lambda rate: one(replace(pts[0], load=replace(pts[0].load, rate=rate))), rates)
    out["points"] = sw.pop("points")
    out["sweep"] = sw
    print(f"perfsuite serve: sweep stopped {sw['stopped']}; knee {sw['knee_rate']} req/s", file=sys.stderr)
    return out
