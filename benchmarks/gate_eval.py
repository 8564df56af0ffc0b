"""End-to-end evaluation of perfsuite's verdicts on this machine, through the real product, with independent trials.

Every trial is one real command in a fresh process: ``perfsuite ab --a TREE_A --b TREE_B`` (two checkouts) or
``pytest tests/perf --benchmark-compare`` run inside a checkout against the baselines committed in it. Regressions
are real code in a second checkout (a commit on top of HEAD), and their true size is measured separately in one
process by interleaving generations of the two trees' decode steps. Trials of all conditions run in one random
interleaved order, so slow drift of the machine spreads over every condition. Rates get Clopper-Pearson intervals.

  python benchmarks/gate_eval.py trees OUT                    # OUT/A, OUT/A2 and one tree per regression
  python benchmarks/gate_eval.py true-size OUT --gens 120     # each tree's decode vs A's, interleaved in-process
  python benchmarks/gate_eval.py trials OUT --plan "ab:spin05:2m:20,ab:A2:2m:20,pytest:A2:30,pytest:nograd:30"
  python benchmarks/gate_eval.py report OUT                   # tables (also OUT/report.md)
  python benchmarks/gate_eval.py reeval OUT min_run_cv=0.05   # the kept pytest runs under other gate settings
  python benchmarks/gate_eval.py dispersion OUT [OUT ...]     # do the pairs of an A/A trial share an offset?

Plan items: ``ab:<tree>:<budget>:<trials>[:seq]`` (A vs <tree>; ``seq``: ``--pairs sequential``, else lockstep) and ``pytest:<tree>:<trials>`` (``--benchmark-compare``
inside <tree>, with pytest-benchmark's ``--benchmark-compare-fail=median:5%`` beside it). ``trials`` is resumable:
it appends to OUT/trials.jsonl and only runs what is missing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BACKEND_FILE = "perfsuite/measure/backends/torch_backend.py"
DECODE_HEAD = '''    @torch.inference_mode()
    def _step(self, ids: torch.Tensor, past: Any) -> StepResult:
        out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
        nxt = out.logits[:, -1, :].argmax(dim=-1)
'''
LOAD_LINE = "model = load_torch_model(self.cell.model_dir, self.cell.dtype, self.cell.attn_implementation)"


def _spin(fraction: float) -> tuple[str, str]:
    """A decode step followed by host-side busy work for ``fraction`` x the step (the calibration spin, as code)."""
    new = DECODE_HEAD.replace("        out = self.model(", "        t0 = time.perf_counter()\n        out = self.model(")
    new += f"        burn_for({fraction!r} * (time.perf_counter() - t0))  # regression under test\n"
    return new, f"decode spins {fraction:.0%} of each step on the host"


# name -> (replacement of DECODE_HEAD, commit message), or (text replaced, replacement, commit message)
REGRESSIONS: dict[str, tuple[str, ...]] = {
    "spin02": _spin(0.02),
    "spin05": _spin(0.05),
    "spin10": _spin(0.10),
    # an ordinary change: the decode step under no_grad instead of inference_mode (autograd's version counters and
    # view tracking come back on every op)
    "nograd": (DECODE_HEAD.replace("@torch.inference_mode()", "@torch.no_grad()"),
               "decode under torch.no_grad() instead of torch.inference_mode()"),
    # the model loaded with eager attention instead of the configured SDPA (issue 38's regression)
    "eager": (LOAD_LINE, LOAD_LINE.replace("self.cell.attn_implementation)", '"eager")'),
              "load the model with eager attention instead of the configured SDPA"),
    # same cost, other tokens: every step picks argmax + 1 (the outputs guard's case)
    "argmax1": (DECODE_HEAD.replace("nxt = out.logits[:, -1, :].argmax(dim=-1)",
                                    "nxt = (out.logits[:, -1, :].argmax(dim=-1) + 1) % out.logits.shape[-1]"),
                "each step picks the token after the argmax (same cost, other tokens)"),
}


def run_child(cmd: list[str], *, cwd: Path, env: dict[str, str] | None, grace_s: float = 120.0
              ) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True)``, except on Ctrl-C: ``subprocess.run`` SIGKILLs its
    child 0.25 s after the interrupt, before the child has removed its worker folders and worktree (which left
    ``/tmp/perfsuite-workers-*`` behind in campaign 7). Here the child, in a session of its own so that a
    ``kill -INT -- -PGID`` of the campaign reaches it once, through us, gets that SIGINT and ``grace_s`` to clean up."""
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate()
        except BaseException:
            try:
                proc.send_signal(signal.SIGINT)
                proc.communicate(timeout=grace_s)
            except BaseException:
                proc.kill()
                proc.wait()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _record(tree: Path, runs: int) -> None:
    """``runs`` recording runs of the torch cells in ``tree`` for this machine's runner class, committed there: the
    trials then compare against baselines this machine made (at the start of the campaign), as a team's would be."""
    accepted = 0
    for i in range(runs):
        proc = run_child([sys.executable, "-m", "pytest", "tests/perf", "--perf-backend", "torch", "-q",
                               "-p", "no:randomly", "-p", "no:cacheprovider", "--perf-update-baselines"],
                              cwd=tree, env=_env(tree))
        if proc.returncode != 0:  # e.g. the baseline acceptance refused a run of a drifting machine: keep the others
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
            print(f"recording run {i + 1}/{runs} in {tree} not kept (rc {proc.returncode}): {tail[0][:300]}",
                  flush=True)
            continue
        accepted += 1
        print(f"recorded baseline run {i + 1}/{runs}", flush=True)
    if not accepted:
        sys.exit(f"no recording run in {tree} was kept; see the lines above")
    git("add", "baselines", cwd=tree)
    git("commit", "-qm", f"Baselines: {accepted} of {runs} runs of the torch cells recorded on this machine for gate "
        "evaluation", cwd=tree)
    print(f"{accepted} of {runs} recording runs kept and committed in {tree}", flush=True)


def _drop_class_baselines(tree: Path) -> None:
    """Remove this machine's runner class's committed baselines from ``tree`` (``trees --fresh``), so that the
    campaign's baselines are only the runs it records, as on a class with no baselines yet."""
    from perfsuite.machine import runner_class

    name = runner_class.detect("cpu")[0]
    if (tree / "baselines" / name).is_dir():
        git("rm", "-rq", f"baselines/{name}", cwd=tree)
        git("commit", "-qm", f"gate evaluation: drop the committed {name} baselines (record this campaign's)", cwd=tree)
        print(f"{tree}: dropped the committed baselines of {name}", flush=True)


def cmd_trees(out: Path, record: int = 0, fresh: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    head = git("rev-parse", "HEAD")
    for name in ["A", "A2", *REGRESSIONS]:
        tree = out / name
        if tree.exists():
            print(f"{tree}: exists")
            if name == "A":
                head = git("rev-parse", "HEAD", cwd=tree)
            continue
        git("worktree", "add", "--detach", str(tree), head)
        if name == "A" and fresh:
            _drop_class_baselines(tree)
            head = git("rev-parse", "HEAD", cwd=tree)
        if name == "A" and record:
            _record(tree, record)
            head = git("rev-parse", "HEAD", cwd=tree)  # every other tree starts from A with its baselines
        if name in REGRESSIONS:
            msg = apply_regression(tree, name)
            git("commit", "-qam", f"regression for gate evaluation: {msg}", cwd=tree)
        print(f"{tree}: {git('log', '-1', '--format=%h %s', cwd=tree)}")


def apply_regression(tree: Path, name: str) -> str:
    """Write REGRESSIONS[name] into ``tree``'s torch backend (uncommitted); returns its commit message."""
    *what, new, msg = REGRESSIONS[name]
    old = what[0] if what else DECODE_HEAD
    f = tree / BACKEND_FILE
    src = f.read_text()
    if old not in src:
        sys.exit(f"{f}: {old.strip().splitlines()[0]!r} not found; update DECODE_HEAD/LOAD_LINE in {__file__}")
    src = src.replace(old, new)
    if "burn_for" in new:
        src = src.replace("import torch\n", "import time\n\nimport torch\n", 1)
        src = src.replace("from perfsuite.machine import memory\n",
                          "from perfsuite.machine import memory\nfrom perfsuite.measure.backends.inject import burn_for\n", 1)
    f.write_text(src)
    return msg


# ------------------------------------------------------------------------------------------------- true size
def _load_backend_class(tree: Path, tag: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_tb_{tag}", tree / BACKEND_FILE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod.TorchBackend


def cmd_true_size(out: Path, gens: int, names: list[str]) -> None:
    """One process, both trees' decode code on the same model, generations interleaved in random order: the
    between-process noise is absent, so the ratio is the change's true size on this machine."""
    import dataclasses

    import numpy as np

    from perfsuite.facts import models
    from perfsuite.facts.cells import Cell, Scenario

    resolved = models.resolve("tiny-llama")
    cell = dataclasses.replace(Cell("torch", "tiny-llama", "float32", Scenario("short", 1, 64, 32)),
                               model_dir=resolved.path)
    prompts = models.prompts(1, 64, resolved.vocab_size)
    results = json.loads((out / "true_size.json").read_text()) if (out / "true_size.json").exists() else {}
    for name in names:
        a = _load_backend_class(out / "A", "A")(cell)
        b = _load_backend_class(out / name, name)(cell)
        a.load()
        b.load()
        tpot: dict[str, list[float]] = {"A": [], "B": []}

        def generation(backend: Any) -> float:
            step = backend.prefill(prompts)
            t0 = time.perf_counter()
            for _ in range(31):
                step = backend.decode(step.state)
            return (time.perf_counter() - t0) / 31 * 1e3

        for _ in range(3):
            generation(a), generation(b)
        for _ in range(gens):
            for side in random.sample(["A", "B"], 2):
                tpot[side].append(generation(a if side == "A" else b))
        ratios = np.log(np.array(tpot["B"]) / np.array(tpot["A"]))
        rng = np.random.default_rng(0)
        boots = [math.expm1(float(np.median(rng.choice(ratios, ratios.size)))) for _ in range(2000)]
        size = math.expm1(float(np.median(ratios)))
        results[name] = {"true_change": size, "ci95": [float(np.percentile(boots, 2.5)),
                                                     float(np.percentile(boots, 97.5))],
                         "median_tpot_ms_A": statistics.median(tpot["A"]),
                         "median_tpot_ms_B": statistics.median(tpot["B"]), "generations": gens,
                         "commit": git("log", "-1", "--format=%h %s", cwd=out / name)}
        print(f"{name}: {size:+.2%} (95% CI {results[name]['ci95'][0]:+.2%} .. {results[name]['ci95'][1]:+.2%}), "
              f"A {results[name]['median_tpot_ms_A']:.3f} ms, B {results[name]['median_tpot_ms_B']:.3f} ms")
        a.close()
        b.close()
    (out / "true_size.json").write_text(json.dumps(results, indent=1))


# ----------------------------------------------------------------------------------------------------- trials
def _parse_plan(plan: str) -> list[dict[str, Any]]:
    items = []
    for part in plan.split(","):
        f = part.strip().split(":")
        if f[0] == "ab" and len(f) in (4, 5) and (len(f) == 4 or f[4] in ("seq", "lockstep")):
            items.append({"kind": "ab", "tree": f[1], "budget": f[2], "n": int(f[3]),
                          "pairs": "sequential" if f[4:] == ["seq"] else "lockstep"})
        elif f[0] in ("pytest", "pytestci", "default") and len(f) == 3:
            # pytestci: with --perf-confirm-inconclusive; default: `--benchmark-compare` alone (issue 38: the default
            # gate), without pytest-benchmark's own --benchmark-compare-fail beside it
            items.append({"kind": "pytest", "tree": f[1], "n": int(f[2]), "ci": f[0] == "pytestci",
                          "default": f[0] == "default"})
        else:
            sys.exit(f"bad plan item {part!r}: ab:<tree>:<budget>:<n>[:seq] or pytest:<tree>:<n>")
    return items


def _key(item: dict[str, Any]) -> str:
    kind = "pytestci" if item.get("ci") else "default" if item.get("default") else item["kind"]
    return f"{kind}:{item['tree']}" + (f":{item['budget']}" if item["kind"] == "ab" else "") + \
        (":seq" if item.get("pairs") == "sequential" else "")


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PERFSUITE_INJECT_DECODE_SLOWDOWN", "PYTHONPATH")}
    env["PYTHONPATH"] = str(tree)
    return env


def run_ab(out: Path, item: dict[str, Any]) -> dict[str, Any]:
    tree = out / item["tree"]
    with tempfile.TemporaryDirectory() as tmp:
        res_path = Path(tmp) / "ab.json"
        t0 = time.monotonic()
        proc = run_child([sys.executable, "-m", "perfsuite.cli", "ab", "--a", str(out / "A"), "--b", str(tree),
                               "--budget", item["budget"], "--backend", "torch", "--json", str(res_path),
                               "--pairs", item.get("pairs", "lockstep")],
                              cwd=tree, env=_env(tree))
        wall = time.monotonic() - t0
        data = json.loads(res_path.read_text()) if res_path.exists() else {}
    rows = {r["metric"]: r for r in data.get("verdicts", [])}
    tp = rows.get("median_tpot_ms", {})
    d = [math.log(b / a) for a, b in zip(tp.get("a_values") or [], tp.get("b_values") or [], strict=True)]
    return {"rc": proc.returncode, "wall_s": wall, "stopped": data.get("stopped"), "tpot_kind": tp.get("kind"),
            "pairs_mode": data.get("pairs_mode"), "zygote": data.get("zygote"), "tpot_pair_sd": statistics.stdev(d) if len(d) > 2 else None,
            "tpot_pair_mad_sd": 1.4826 * statistics.median(abs(x - statistics.median(d)) for x in d)
            if len(d) > 2 else None, "tpot_a_median_ms": statistics.median(tp["a_values"]) if d else None,
            "tpot_change": tp.get("change"), "tpot_ci": [tp.get("ci_low"), tp.get("ci_high")],
            "pairs": tp.get("pairs"), "kinds": {m: r.get("kind") for m, r in rows.items()},
            "tpot_interval": tp.get("interval"), "tpot_d": d,  # per-pair log(B/A): other rules can be replayed
            # ab's own clock: setup + pairs, against its budget; the pair walls say what "one pair" was
            "ab_elapsed_s": data.get("elapsed_s"), "budget_s": data.get("budget_s"), "setup_s": data.get("setup_s"),
            "pair_wall_max_s": max(data.get("pair_walls_s") or [0.0]) or None,
            "pair_wall_median_s": statistics.median(data["pair_walls_s"]) if data.get("pair_walls_s") else None,
            "tail": "" if proc.returncode in (0, 1) else (proc.stdout + proc.stderr)[-1500:]}


_CONFIRM = re.compile(r"perfsuite confirm: (test_\w+)(?:\[\S*)? (\w+):")
_CONFIRM_RUN = re.compile(r"perfsuite confirm: (\d+) pair\(s\) in (\d+) s \(stopped: (\w+)\)")
_CONFIRM_KINDS = [("regression confirmed", "confirmed"), ("the A/B refutes it", "refuted"),
                  ("could not decide in its budget", "inconclusive"), ("cannot confirm", "unconfirmed")]
_PB = re.compile(r"Performance has regressed:\s*(.*?)(?:\n\S|\Z)", re.S)


def run_pytest(out: Path, item: dict[str, Any]) -> dict[str, Any]:
    tree = out / item["tree"]
    runs = out / "runs"
    runs.mkdir(exist_ok=True)
    run_json = runs / f"{item['tree']}-{time.strftime('%Y%m%d-%H%M%S')}.json"  # kept: machine_info, processes
    with tempfile.TemporaryDirectory() as tmp:
        gate_json = Path(tmp) / "gate.json"
        t0 = time.monotonic()
        proc = run_child([sys.executable, "-m", "pytest", "tests/perf", "--perf-backend", "torch", "-q",
                               "-p", "no:randomly", "-p", "no:cacheprovider", "--benchmark-compare",
                               *([] if item.get("default") else ["--benchmark-compare-fail=median:5%"]),
                               f"--perf-gate-json={gate_json}",
                               f"--benchmark-json={run_json}", *(["--perf-confirm-inconclusive"] if item.get("ci")
                                                                 else [])],
                              cwd=tree, env=_env(tree))
        wall = time.monotonic() - t0
        verdicts = json.loads(gate_json.read_text()) if gate_json.exists() else []
        opdiffs = {}
        for f in Path(tmp).glob("opdiff-*.json"):  # a confirmed cell's operator diff (perfsuite.verdict.opdiff)
            d = json.loads(f.read_text())
            opdiffs[d["cell"]] = {"verdict": d["diff"]["verdict"], "seconds": d["seconds"],
                                  "rows": [{k: r[k] for k in ("op", "a_ms", "b_ms", "delta", "share", "claimed",
                                                               "status")} for r in d["diff"]["rows"]]}
    text = proc.stdout + proc.stderr
    run_json.with_suffix(".txt").write_text(text)  # the whole output, as the user read it
    failed = sorted(set(re.findall(r"FAILED \S+::(test_\w+)\[", text)))
    m = _PB.search(text)
    pb = sorted(set(re.findall(r"(test_\w+)\[", m.group(1)))) if m else []
    by = {v["test"].split("::")[-1].split("[")[0]: v for v in verdicts if not v.get("method") == "exact"}
    confirm: dict[str, dict[str, Any]] = {}  # test -> what its confirmation said
    for line in text.splitlines():
        c = _CONFIRM.search(line)
        if c and c.group(1) not in confirm:
            kind = next((k for pat, k in _CONFIRM_KINDS if pat in line), "other")
            secs = re.search(r"pair\(s\) in (\d+) s", line)
            confirm[c.group(1)] = {"kind": kind, "metric": c.group(2), "elapsed_s": int(secs.group(1)) if secs else None,
                                   "line": line.strip()[:400]}
    threads = next((ln.split("threads: ", 1)[1][:200] for ln in text.splitlines()
                    if ln.startswith("perfsuite confirm: threads: ")), None)  # the A/B's thread choice (cotenant)
    took = re.search(r"confirm: (\d+) metric\(s\) A/B-confirmed \((\d+) screened regression\(s\), (\d+) suspected.*? in "
                     r"(\d+) s", text)
    return {"rc": proc.returncode, "wall_s": wall, "gate_failed": failed, "pb_regressed": pb, "run_json": str(run_json),
            "outputs_changed": sorted(set(re.findall(r"outputs changed: (prompt \d+, token \d+: \S+ in the baselines, "
                                                     r"\S+ in this run)", text))),
            "confirmed_by_default": [int(x) for x in took.groups()] if took else None, "opdiff": opdiffs,
            "confirm_threads": threads,
            "confirm": confirm, "confirm_runs": [[int(a), int(b), c] for a, b, c in _CONFIRM_RUN.findall(text)],
            "kinds": {t: v["kind"] for t, v in by.items()},
            "changes": {t: (v["ratio"] - 1 if v.get("ratio") else None) for t, v in by.items()},
            "mde": {t: v.get("mde") for t, v in by.items()},
            "tail": "" if proc.returncode in (0, 1) else text[-1500:]}


class CoTenant:
    """Another CPU-bound process on the machine for the length of one trial (a busy loop in its own process group,
    killed with it afterwards): drift that falls on the trial's every process, as on a shared runner."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> CoTenant:
        if self.on:
            self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            import signal

            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def cmd_trials(out: Path, plan: str, seed: int | None, cotenant: float = 0.0) -> None:
    items = _parse_plan(plan)
    log = out / "trials.jsonl"
    done: dict[str, int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            r = json.loads(line)
            done[r["key"]] = done.get(r["key"], 0) + 1
    # a co-tenant on a fixed share of each condition's trials (stratified, so every condition gets its share)
    busy_done: dict[str, int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            r = json.loads(line)
            busy_done[r["key"]] = busy_done.get(r["key"], 0) + bool(r.get("cotenant"))
    todo: list[tuple[dict[str, Any], bool]] = []
    for it in items:
        left = max(0, it["n"] - done.get(_key(it), 0))
        busy = min(left, max(0, math.ceil(it["n"] * cotenant) - busy_done.get(_key(it), 0)))
        todo += [(it, True)] * busy + [(it, False)] * (left - busy)
    random.Random(seed).shuffle(todo)
    print(f"{len(todo)} trial(s) to run", flush=True)
    t_start = time.monotonic()
    for i, (it, busy) in enumerate(todo, 1):
        load0 = os.getloadavg()[0]
        with CoTenant(busy):
            res = run_ab(out, it) if it["kind"] == "ab" else run_pytest(out, it)
        rec = {"key": _key(it), **it, **res, "cotenant": busy, "load1_start": load0, "load1_end": os.getloadavg()[0],
               "finished": time.time()}
        with log.open("a") as fh:
            fh.write(json.dumps(rec) + "\n")
        left = (time.monotonic() - t_start) / i * (len(todo) - i)
        summary = (f"tpot {res.get('tpot_kind')} after {res.get('pairs')} pairs" if it["kind"] == "ab" else
                   f"gate failed {res['gate_failed'] or '-'}; pytest-benchmark {res['pb_regressed'] or '-'}")
        print(f"[{i}/{len(todo)}] {_key(it)}{' +cotenant' if busy else ''} rc={res['rc']} {res['wall_s']:.0f}s {summary}; ~{left / 60:.0f} min left",
              flush=True)


# ------------------------------------------------------------------------------------------------------ reeval
def cmd_reeval(out: Path, overrides: list[str]) -> None:
    """The same pytest trials (their kept run JSONs) decided again under other gate settings, e.g. a min_run_cv
    floor measured separately: a paired comparison of settings on identical measurements, not new trials."""
    from perfsuite.orchestrate import baselines
    from perfsuite.verdict.policy import parse_config
    from perfsuite.verdict.screen import GateSession

    # the A tree's folder: named with the CPU tier since issue 17, without it in trees checked out before
    base_dir = next((d for d in (out / "A" / "baselines" / n for n in ("cpu-intel-xeon-amx-2c", "cpu-intel-xeon-2c"))
                     if d.is_dir()), out / "A" / "baselines" / "cpu-intel-xeon-amx-2c")
    base = baselines.read_runs(base_dir)
    import tomllib

    raw = tomllib.loads((out / "A" / "pyproject.toml").read_text())["tool"]["perfsuite"].get("gate", {})
    for kv in overrides:
        k, v = kv.split("=", 1)
        raw[k] = float(v)
    cfg = parse_config(raw)
    recs = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    rows: dict[str, list[bool]] = {}
    for r in recs:
        if r["kind"] != "pytest" or not r.get("run_json") or not Path(r["run_json"]).exists():
            continue
        run = json.loads(Path(r["run_json"]).read_text())
        gs = GateSession(base, cfg)
        gs.family = {b["fullname"]: 1 for b in run["benchmarks"]}
        failed = False
        for b in run["benchmarks"]:
            failed |= any(v.failed for v in gs.check(b["fullname"], b["extra_info"], b["stats"]))
        rows.setdefault(r["tree"], []).append(failed)
    print(f"gate settings: {dict(raw)}")
    for tree, hits in sorted(rows.items()):
        print(f"  {tree:8s} run fails: {_rate(sum(hits), len(hits))}")


# ----------------------------------------------------------------------------------------------------- report
def _rate(k: int, n: int) -> str:
    from scipy.stats import binomtest

    if n == 0:
        return "n/a"
    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    return f"{k}/{n} = {100 * k / n:.1f} % (95 % CI {100 * ci.low:.1f}-{100 * ci.high:.1f} %)"


def _drift_section(recs: list[dict[str, Any]]) -> list[str]:
    """What the A/A pytest trials say about the machine over time: each is an unchanged tree measured against the
    same committed baselines, so its TPOT change is drift plus the run's own noise."""
    aa = sorted((r for r in recs if r["kind"] == "pytest" and r["tree"] == "A2" and r["rc"] in (0, 1)
                 and "test_tpot" in r.get("changes", {})), key=lambda r: r["finished"])
    if len(aa) < 3:
        return []
    logs = [math.log1p(r["changes"]["test_tpot"]) for r in aa]
    srt = sorted(logs)
    q = lambda p: math.expm1(srt[min(len(srt) - 1, int(p * len(srt)))])  # noqa: E731
    hours = (aa[-1]["finished"] - aa[0]["finished"]) / 3600
    over = lambda x: sum(v > math.log1p(x) for v in logs)  # noqa: E731
    lines = ["", "## Drift: A/A pytest runs against the committed baselines (TPOT)", "",
             f"{len(aa)} runs of the unchanged tree over {hours:.1f} h. Change of each run's TPOT against the mean of the "
             f"baseline runs: median {math.expm1(statistics.median(logs)):+.1%}, SD of log {statistics.stdev(logs):.1%}, "
             f"10th-90th percentile {q(0.1):+.1%} .. {q(0.9):+.1%}, range {math.expm1(srt[0]):+.1%} .. "
             f"{math.expm1(srt[-1]):+.1%}; {over(0.05)} runs beyond +5 %, {over(0.10)} beyond +10 %.", "",
             "| finished (UTC) | TPOT change | gate TPOT verdict |", "|---|---|---|"]
    for r in aa:
        lines.append(f"| {time.strftime('%H:%M', time.gmtime(r['finished']))} | {r['changes']['test_tpot']:+.1%} | "
                     f"{r['kinds'].get('test_tpot', '-')} |")
    return lines


def _conditions_section(recs: list[dict[str, Any]]) -> list[str]:
    """Every condition split by machine state (quiet / beside a co-tenant), with what the confirmation said and
    what it cost: the run-fail rate is the product's verdict, the rest says why."""
    lines = ["", "## By machine state: quiet vs beside a co-tenant busy process", "",
             "| trial kind | tree | state | trials | run fails (gate) | confirmations: kinds | confirmation s (median / max) "
             "| trial wall s (median / max) | ab: TPOT log(B/A) per pair, SD (robust), median |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({r["key"] for r in recs}):
        for busy in (False, True):
            rs = [r for r in recs if r["key"] == key and bool(r.get("cotenant")) == busy and r["rc"] in (0, 1)]
            if not rs:
                continue
            fails = sum(bool(r.get("gate_failed")) if r["kind"] == "pytest" else r["rc"] == 1 for r in rs)
            kinds: dict[str, int] = {}
            secs: list[float] = []
            for r in rs:
                for c in (r.get("confirm") or {}).values():
                    kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
                secs += [float(run[1]) for run in r.get("confirm_runs") or []]
            walls = [r["wall_s"] for r in rs]
            kind, tree = key.split(":")[0], key.split(":", 1)[1]
            lines.append(f"| {kind} | {tree} | {'co-tenant' if busy else 'quiet'} | {len(rs)} | "
                         f"{_rate(fails, len(rs))} | " + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "-")
                         + f" | {statistics.median(secs):.0f} / {max(secs):.0f}" if secs else
                         f"| {kind} | {tree} | {'co-tenant' if busy else 'quiet'} | {len(rs)} | "
                         f"{_rate(fails, len(rs))} | " + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "-")
                         + " | -")
            lines[-1] += f" | {statistics.median(walls):.0f} / {max(walls):.0f} | {_sd_cell(rs)} |"
    return lines


def _sd_cell(rs: list[dict[str, Any]]) -> str:
    sds = [r["tpot_pair_sd"] for r in rs if r.get("tpot_pair_sd") is not None]
    mads = [r["tpot_pair_mad_sd"] for r in rs if r.get("tpot_pair_mad_sd") is not None]
    return f"{statistics.median(sds):.1%} ({statistics.median(mads):.1%})" if sds else "-"


def _replay(d: list[float], alpha: float, final_share: float) -> tuple[str, int]:
    """The TPOT verdict of ``d`` (per-pair log(B/A)) under the A/B's rule with ``final_share`` of alpha kept for a
    close at the last pair (0: the sequence alone, the rule before c5028be): (kind, pairs used)."""
    from perfsuite.verdict import sequential

    tau, eps = math.log1p(0.01), math.log1p(0.02)  # ab_threshold and ab_margin defaults
    cs = sequential.ConfidenceSequence(alpha, final_share=final_share)
    for x in d:
        cs.update(x)
        kind = sequential.decide(cs, tau, eps).kind
        if kind != "open" and cs.n >= 2:
            return kind, cs.n
    if final_share:
        cs.close()
    kind = sequential.decide(cs, tau, eps).kind
    return ("inconclusive" if kind == "open" else kind), cs.n


def _replay_section(recs: list[dict[str, Any]]) -> list[str]:
    """Every ab trial that kept its pairs, replayed under both rules (alpha 0.01 over 3 gated metrics, as run): what
    the close at the budget changed on the same pairs. Early stops replay identically only where the sequence
    decided; a trial the new rule stopped early ends there for both."""
    rows = [r for r in recs if r["kind"] == "ab" and r.get("tpot_d")]
    if not rows:
        return []
    out = ["", "## ab trials replayed: the sequence alone against the sequence closed at the budget (same pairs)", "",
           "| trial | co-tenant | pairs | stopped | verdict as run | sequence alone (alpha/3) | closed at the budget |",
           "|---|---|---|---|---|---|---|"]
    counts: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        old, _ = _replay(r["tpot_d"], 0.01 / 3, 0.0)
        new, _ = _replay(r["tpot_d"], 0.01 / 3, 0.5)
        c = counts.setdefault((r["tree"], r["budget"]), [0, 0, 0])
        c[0] += 1
        c[1] += old == "regression"
        c[2] += new == "regression"
        out.append(f"| {r['key']} | {'yes' if r['cotenant'] else 'no'} | {r['pairs']} | {r['stopped']} | "
                   f"{r['tpot_kind']} ({r.get('tpot_interval')}) | {old} | {new} |")
    out += ["", "| B tree | budget | trials | TPOT regression, sequence alone | closed at the budget |", "|---|---|---|---|---|"]
    for (tree, budget), (n, o, w) in sorted(counts.items()):
        out.append(f"| {tree} | {budget} | {n} | {_rate(o, n)} | {_rate(w, n)} |")
    return out


def _aa_dispersion(recs: list[dict[str, Any]]) -> list[tuple[float, int, float, bool]]:
    """Per lockstep A/A ab trial with >= 10 pairs: (z, pairs, trimmed-mean log(B/A), co-tenant), z = Yuen's t of the
    10 % trimmed mean of the per-pair TPOT log-ratios, as the normal quantile of its t distribution. Pairs that are independent draws
    around 0 give z ~ N(0, 1) across trials; a per-run offset shared by all pairs of a trial inflates var(z)."""
    import numpy as np
    from scipy import stats as sst

    out = []
    for r in recs:
        d = r.get("tpot_d") or []
        if r["kind"] != "ab" or r["tree"] != "A2" or len(d) < 10:
            continue
        x = [float(v) for v in sst.mstats.winsorize(np.asarray(d, dtype=float), (0.1, 0.1))]
        se = statistics.stdev(x) / (0.8 * math.sqrt(len(d)))
        tm = float(sst.trim_mean(d, 0.1))
        h = len(d) - 2 * int(0.1 * len(d))  # Yuen's t has h - 1 degrees of freedom: as a normal quantile
        z = float(sst.norm.ppf(sst.t.cdf(tm / se, h - 1))) if se > 0 else 0.0
        out.append((z, len(d), tm, bool(r.get("cotenant"))))
    return out


def _dispersion_lines(zs: list[tuple[float, int, float, bool]], title: str) -> list[str]:
    from scipy import stats as sst

    if len(zs) < 2:
        return []
    z = [t[0] for t in zs]
    chi2 = sum(v * v for v in z)
    beyond = sum(abs(v) > 1.96 for v in z)
    return ["", f"## {title}", "",
            f"{len(z)} lockstep A/A trials (>= 10 pairs). z = Yuen's t of TPOT log(B/A) per pair, as a normal quantile: "
            f"var(z) = {statistics.variance(z):.2f} (independent pairs: 1), sum z^2 = {chi2:.1f} on {len(z)} df, "
            f"p = {sst.chi2.sf(chi2, len(z)):.2g}; |z| > 1.96 in {_rate(beyond, len(z))} (expected 5 %). "
            f"Centred on 0? mean z = {statistics.fmean(z):+.2f} (SE {1 / math.sqrt(len(z)):.2f} if independent, "
            f"p = {2 * sst.norm.sf(abs(statistics.fmean(z)) * math.sqrt(len(z))):.2g}); B slower in "
            f"{sum(v > 0 for v in z)} of {len(z)}.", "",
            "| z | pairs | trimmed mean log(B/A) | co-tenant |", "|---|---|---|---|",
            *(f"| {v:+.2f} | {n} | {m:+.2%} | {'yes' if c else 'no'} |" for v, n, m, c in zs)]


def cmd_dispersion(outs: list[Path]) -> None:
    """The A/A overdispersion test pooled over campaigns (each OUT's trials.jsonl)."""
    zs = []
    for out in outs:
        zs += _aa_dispersion([json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()])
    print("\n".join(_dispersion_lines(zs, f"A/A overdispersion, pooled over {len(outs)} campaign(s)")))


def _overrun_lines(recs: list[dict[str, Any]]) -> list[str]:
    """ab's own elapsed time (setup + pairs) against its budget, per trial that ran to the budget; recorded by
    trials since 2026-12-04 23:17 (earlier ones have the command's wall only)."""
    rs = [r for r in recs if r["kind"] == "ab" and r.get("ab_elapsed_s") is not None and r["stopped"] == "budget"]
    if not rs:
        return []
    over = [(r["ab_elapsed_s"] - r["budget_s"], r) for r in rs]
    worst, wr = max(over, key=lambda t: t[0])
    in_pairs = [o / r["pair_wall_max_s"] for o, r in over if r.get("pair_wall_max_s")]
    return ["", f"Budget: {len(rs)} ab trial(s) ran to their budget; ab's own clock (setup + pairs) overran it by at most "
            f"{worst:+.1f} s ({wr['key']}, budget {wr['budget_s']:.0f} s, its slowest pair {wr['pair_wall_max_s']:.1f} s, "
            f"median pair {wr['pair_wall_median_s']:.1f} s); overrun / slowest pair: max {max(in_pairs, default=float('nan')):.2f}, "
            f"{sum(x > 1 for x in in_pairs)} of {len(in_pairs)} above one pair. The command's wall adds interpreter "
            f"start and exit: max {max(r['wall_s'] - r['budget_s'] for r in rs):+.1f} s over the budget."]


def cmd_report(out: Path) -> None:
    recs = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    true = json.loads((out / "true_size.json").read_text()) if (out / "true_size.json").exists() else {}
    lines = ["# perfsuite gate evaluation", "", f"trials: {len(recs)}, from {time.ctime(min(r['finished'] for r in recs))}"
             f" to {time.ctime(max(r['finished'] for r in recs))}", ""]
    lines += ["## True size of each regression (one process, interleaved generations)", "",
              "| tree | change | true TPOT change (95 % CI) |", "|---|---|---|"]
    for name, t in true.items():
        lines.append(f"| {name} | {t['commit']} | {t['true_change']:+.2%} ({t['ci95'][0]:+.2%} .. {t['ci95'][1]:+.2%}) |")
    lines += ["", "## perfsuite ab (A = HEAD, B = tree), torch tiny-llama cell", "",
              "| B tree | budget | trials | TPOT regression verdicts | any regression | median pairs | median wall | "
              "TPOT log(B/A) per pair: SD (robust), median of trials |", "|---|---|---|---|---|---|---|---|"]
    for key in sorted({r["key"] for r in recs if r["kind"] == "ab"}):
        rs = [r for r in recs if r["key"] == key and r["rc"] in (0, 1)]
        bad = [r for r in recs if r["key"] == key and r["rc"] not in (0, 1)]
        k = sum(r["tpot_kind"] == "regression" for r in rs)
        anyk = sum(r["rc"] == 1 for r in rs)
        lines.append(f"| {rs[0]['tree'] if rs else key} | {key.split(':')[-1]} | {len(rs)}"
                     + (f" (+{len(bad)} failed)" if bad else "") + f" | {_rate(k, len(rs))} | {_rate(anyk, len(rs))} | "
                     f"{statistics.median([r['pairs'] or 0 for r in rs]) if rs else '-'} | "
                     f"{statistics.median([r['wall_s'] for r in rs]) if rs else 0:.0f} s | {_sd_cell(rs)} |")
    lines += _overrun_lines(recs)
    lines += ["", "## pytest --benchmark-compare against the committed baselines, torch tiny-llama cell", "",
              "| tree | trials | gate: run fails | gate: test_tpot fails | pytest-benchmark median:5%: any | "
              "median:5%: test_tpot | gate TPOT verdicts |", "|---|---|---|---|---|---|---|"]
    for key in sorted({r["key"] for r in recs if r["kind"] == "pytest"}):
        rs = [r for r in recs if r["key"] == key and r["rc"] in (0, 1)]
        kinds: dict[str, int] = {}
        for r in rs:
            kinds[r["kinds"].get("test_tpot", "none")] = kinds.get(r["kinds"].get("test_tpot", "none"), 0) + 1
        lines.append(f"| {key} | {len(rs)} | {_rate(sum(bool(r['gate_failed']) for r in rs), len(rs))} | "
                     f"{_rate(sum('test_tpot' in r['gate_failed'] for r in rs), len(rs))} | "
                     f"{_rate(sum(bool(r['pb_regressed']) for r in rs), len(rs))} | "
                     f"{_rate(sum('test_tpot' in r['pb_regressed'] for r in rs), len(rs))} | "
                     + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + " |")
    lines += _default_section(recs)
    lines += _replay_section(recs)
    lines += _conditions_section(recs)
    lines += _drift_section(recs)
    lines += _dispersion_lines(_aa_dispersion(recs), "A/A overdispersion: do a trial's pairs share an offset?")
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    print(text)


def _default_section(recs: list[dict[str, Any]]) -> list[str]:
    """Issue 38's rows: the default `--benchmark-compare` (no option) per tree: run fails, why (confirmed regression
    or outputs changed), the default confirmation's wall, the operator diff's verdict, top 3 and seconds."""
    rs_all = [r for r in recs if r.get("default") and r["rc"] in (0, 1)]
    if not rs_all:
        return []
    out = ["", "## default `pytest --benchmark-compare` (issue 38)", "",
           "| tree | trials (co-tenant) | run fails | outputs changed | confirmation wall median / max | confirmed metrics "
           "(screened regression / suspected) | operator diff: verdict, top 3 by share, seconds |", "|---|---|---|---|---|---|---|"]
    for tree in sorted({r["tree"] for r in rs_all}):
        rs = [r for r in rs_all if r["tree"] == tree]
        walls = [r["confirmed_by_default"][3] if r.get("confirmed_by_default") else 0 for r in rs]
        conf = [r["confirmed_by_default"] for r in rs if r.get("confirmed_by_default")]
        ops = []
        for r in rs:
            for d in (r.get("opdiff") or {}).values():
                top = sorted(d["rows"], key=lambda x: -abs(x["share"] or 0))[:3]
                ops.append(f"{d['verdict']} {'/'.join(x['op'].removeprefix('aten::') for x in top)} {d['seconds']:.0f}s")
        out.append(f"| {tree} | {len(rs)} ({sum(bool(r['cotenant']) for r in rs)}) | "
                   f"{_rate(sum(r['rc'] == 1 for r in rs), len(rs))} | "
                   f"{sum(bool(r.get('outputs_changed')) for r in rs)}/{len(rs)} | "
                   f"{statistics.median(walls):.0f} / {max(walls):.0f} s | "
                   f"{sum(c[1] for c in conf)} / {sum(c[2] for c in conf)} | {'; '.join(ops) or '-'} |")
    return out


def main() -> None:
    # Started with `&` from a script (`nohup ... &`), a process inherits SIGINT *ignored*: `kill -INT` then stopped
    # nothing (2026-12-04). perfsuite.machine.signals.stoppable gives Ctrl-C back, and SIGTERM the same path.
    from perfsuite.machine.signals import stoppable

    with stoppable():
        _main()


def _main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("trees")
    p.add_argument("out", type=Path)
    p.add_argument("--record", type=int, default=0, help="record this many baseline runs in A (this machine's class)")
    p.add_argument("--fresh", action="store_true", help="first drop A's committed baselines of this machine's class")
    p = sub.add_parser("true-size")
    p.add_argument("out", type=Path)
    p.add_argument("--gens", type=int, default=120)
    p.add_argument("--trees", default=",".join(["A2", *REGRESSIONS]))
    p = sub.add_parser("trials")
    p.add_argument("out", type=Path)
    p.add_argument("--plan", required=True)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--cotenant", type=float, default=0.0, help="share of trials run beside a busy co-tenant process")
    p = sub.add_parser("report")
    p.add_argument("out", type=Path)
    p = sub.add_parser("dispersion")
    p.add_argument("outs", type=Path, nargs="+")
    p = sub.add_parser("reeval")
    p.add_argument("out", type=Path)
    p.add_argument("settings", nargs="*", help="gate settings, e.g. min_run_cv=0.05")
    a = ap.parse_args()
    if a.cmd == "trees":
        cmd_trees(a.out, a.record, a.fresh)
    elif a.cmd == "true-size":
        cmd_true_size(a.out, a.gens, a.trees.split(","))
    elif a.cmd == "trials":
        cmd_trials(a.out, a.plan, a.seed, a.cotenant)
    elif a.cmd == "reeval":
        cmd_reeval(a.out, a.settings)
    elif a.cmd == "dispersion":
        cmd_dispersion(a.outs)
    else:
        cmd_report(a.out)


if __name__ == "__main__":
    main()
