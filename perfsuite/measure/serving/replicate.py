"""One replicate of a serving cell, measured from a given tree and interpreter: what ``perfsuite ab`` needs for
serving cells, where a replicate is a server start (docs/serving.md).

The coordinator runs ``python -m perfsuite.measure.serving.replicate measure ARGS_JSON`` with the side's interpreter
in the side's tree (``PYTHONPATH`` = that tree, as its worker processes): the side's own perfsuite starts its own
vLLM server for the cell (a fresh start: port, KV cache, threads), runs the cell's point once (its sweep too),
checks the server's ``/metrics`` against the client, stops the server with its children and prints one JSON line.
The coordinator turns it into a ProcessResult, so the A/B loop treats a start as a worker process. ``list`` prints
the side's serving cells for a profile, as ``perfsuite.measure.worker plan`` does for the engine cells.
"""

from __future__ import annotations

import fnmatch
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.facts.vocabulary import LATENCIES


def select(conf: Any, args: Mapping[str, Any]) -> list[Any]:
    """The serving cells of ``conf`` under ab's/calibrate's filters: ``--backend`` (None, or including ``vllm`` or
    ``vllm-serve``), ``--model`` and the ``--cells`` glob. The default glob ``*`` selects none: a serving replicate
    is a server start (a minute here), so they join when ``--cells`` names them (``--cells 'vllm-serve-*'``)."""
    glob = args.get("cells") or "*"
    if glob == "*":
        return []
    backends = [b.strip() for b in str(args.get("backend") or "").split(",") if b.strip()]
    if backends and not {"vllm", "vllm-serve"} & set(backends):
        return []
    models = [m.strip() for m in str(args.get("model") or "").split(",") if m.strip()]
    return [c for c in conf.cells if (not models or c.model in models) and fnmatch.fnmatchcase(c.id, glob)]


def _conf(profile: str) -> Any:
    from perfsuite.facts import config as cfg
    from perfsuite.measure.serving import cell as sc

    return sc.load(cfg.find_pyproject(Path.cwd()), profile)


def _list(args: Mapping[str, Any]) -> dict[str, Any]:
    return {"cells": [c.as_dict() for c in select(_conf(args.get("profile") or "smoke"), args)]}


def _measure(args: Mapping[str, Any]) -> dict[str, Any]:
    import dataclasses

    from perfsuite.facts import PACKAGE_FILE
    from perfsuite.measure.serving import cell as sc

    conf = _conf(args.get("profile") or "smoke")
    cells = [c for c in conf.cells if c.id == args["cell"]]
    if not cells:
        return {"error": f"this tree's [tool.perfsuite.serving.{args.get('profile')}] has no cell {args['cell']}"}
    t0 = time.monotonic()
    runs = sc.measure(cells, dataclasses.replace(conf, server_starts=1), None, seed=int(args.get("index", 0)))
    r = runs[cells[0].id]
    if r.error or not r.replicates:
        return {"error": r.error or "no server start measured it"}
    if problem := sc.prometheus_problem(r):
        return {"error": problem}
    rep = r.replicates[0]
    res = {k: v for k, v in rep.result.items() if k != "records"}
    return {"result": res, "pid": rep.pid, "start_s": rep.start_s, "wall_s": time.monotonic() - t0,
            "perfsuite_file": PACKAGE_FILE}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("list", "measure"):
        print("usage: python -m perfsuite.measure.serving.replicate list|measure ARGS_JSON", file=sys.stderr)
        return 2
    args = json.loads(argv[1])
    try:
        out = _list(args) if argv[0] == "list" else _measure(args)
    except ValueError as exc:  # a bad serving table: one line
        out = {"error": str(exc)}
    print(json.dumps(out, default=str))
    return 0


# ------------------------------------------------------------------------------------------------ coordinator
def _call(side: Any, what: str, args: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    from perfsuite.measure.worker.pool import SideError, last_json, last_line

    proc = side.run("perfsuite.measure.serving.replicate", what, json.dumps(dict(args)), timeout_s=timeout_s)
    out = last_json(proc)
    if out is None:
        raise SideError(f"{side.who('serving replicate')}: {side.python} cannot {what} serving cells from "
                        f"{side.tree} ({last_line(proc)}; a tree from before perfsuite.measure.serving.replicate has "
                        "no serving A/B)")
    return out


def cells(side: Any, plan_args: Mapping[str, Any], timeout_s: float = 300) -> list[dict[str, Any]]:
    """The serving cells ``side``'s own tree selects (its pyproject.toml's serving table for the profile); none
    from a tree that predates this module (its engine cells still compare)."""
    from perfsuite.measure.worker.pool import SideError

    if (plan_args.get("cells") or "*") == "*" or not side.has("perfsuite.measure.serving.replicate"):
        return []
    out = _call(side, "list", plan_args, timeout_s)
    if "error" in out:
        raise SideError(f"side {side.label} ({side.tree}): {out['error']}")
    return list(out["cells"])


def measure(side: Any, cell: Mapping[str, Any], profile: str, index: int, label: str,
            timeout_s: float = 3600) -> Any:
    """One server start of ``cell`` from ``side``'s tree, as a ProcessResult whose every metric (ttft, tpot, itl,
    e2el) carries all four per-request sample lists; ``error`` says why a start or its point failed."""
    from perfsuite.measure.worker.job import MetricResult, ProcessResult

    t0 = time.monotonic()
    out = _call(side, "measure", {"profile": profile, "cell": cell["id"], "index": index}, timeout_s)
    wall = time.monotonic() - t0
    if "error" in out:
        return ProcessResult.failed(index, 0, label, str(out["error"]).splitlines()[0], str(out["error"]), wall)
    res = out["result"]
    samples = {f"{m}_ms": list(res["samples"].get(f"{m}_ms", [])) for m in LATENCIES}
    tokens = int(res["metrics"].get("total_output_tokens", 0))
    ms = {m: MetricResult(rounds_s=[v / 1e3 for v in samples[f"{m}_ms"]], samples=samples, generated_tokens=tokens,
                          first_tokens=[], memory={}) for m in LATENCIES}
    return ProcessResult(index=index, pid=int(out["pid"]), label=label, metrics=ms,
                         backend_info={"server_start_s": out["start_s"], "metrics": res["metrics"],
                                       "prometheus": res["prometheus"], "sweep": res.get("sweep")},
                         load_s=float(out["start_s"]), wall_s=wall, perfsuite_file=str(out["perfsuite_file"]))


def measure_or_fail(side: Any, cell: Mapping[str, Any], profile: str, index: int, label: str) -> Any:
    """:func:`measure`, or ab's usage error (exit 2) naming the side, the pair and why the start failed."""
    from perfsuite.facts.errors import UsageError

    pr = measure(side, cell, profile, index, label)
    if pr.error:
        raise UsageError(f"side {label}, pair {index}, {cell['id']}: server start failed: {pr.detail}")
    return pr


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
