"""Baseline acceptance at the end of a recording run (``--perf-update-baselines``): a run is stored only if the
whole session passed, it measured something, and the gate's own outlier test does not say the machine was
disturbed; the write is atomic (baselines.write_run). A refused or failed write says what it kept.
"""

from __future__ import annotations

import json
import math
from typing import Any

from perfsuite.orchestrate import baselines
from perfsuite.orchestrate.session import PerfSession


def finish_recording(ps: PerfSession, exitstatus: int, testsfailed: bool, tag: str) -> bool:
    """Store this run's JSON (``ps.baseline_json``) as a baseline run named with pytest-benchmark's ``tag``, or note
    why not. False when the session must fail (a refusal by the outlier test, a write that failed after measuring)."""
    tmp = ps.baseline_json
    assert tmp is not None
    keep = False
    try:
        if exitstatus != 0 or testsfailed:
            ps.notes.append(f"perfsuite: run did not pass (exit status {exitstatus}); no baseline written")
            return True
        data = json.loads(tmp.read_text()) if tmp.is_file() else {}
        if not data.get("benchmarks"):
            ps.notes.append("perfsuite: no benchmark ran; no baseline written")
            return True
        if refusal := outlier(ps, data):
            ps.notes.append(refusal)
            return False
        try:
            path = baselines.write_run(ps.baseline_dir, data, f"{ps.settings.profile.name}_{tag}",
                                       baselines_dir=ps.settings.config.baselines_dir)
        except (OSError, baselines.BaselineError) as exc:
            keep = True
            ps.notes.append(f"perfsuite: could not store the baseline in {ps.baseline_dir} ({exc}); this run's "
                            f"results are kept in {tmp}: fix the folder and copy it in with perfsuite's name scheme")
            return False
        ps.notes.append(f"perfsuite: recorded baseline {path}")
        return True
    finally:
        if not keep and tmp.is_file() and tmp.name.startswith("perfsuite-run-"):
            tmp.unlink()


# How much larger than the stored runs' median within-run variance (of the log run value) the new run's must be to
# call it noisy inside. Accepted runs of the committed series reach 7.2x their cell's median (Xeon TTFT; the EPYC
# series 2.5x); a run with 4 of 10 processes stalled at 3-120x the others has 0.34, against at most 0.013 in the
# 80 torch and ONNX Runtime TTFT/TPOT values of both series' accepted runs.
NOISY_INSIDE = 10.0


def _slower_and_noisy(v: Any, data: dict[str, Any], stored: list[dict[str, Any]]) -> bool:
    """Inconclusive, with an estimate worse than the threshold, and disturbed by the run's own evidence: noisy inside
    (a run whose processes stalled, seen: 4 of 10 at 30-550x the others beside a co-runner, is too noisy to fail the
    test, and exactly the run that must not become a baseline), or slower than the slowest stored run by more than
    the stored runs' own range (and the threshold). A run that is inconclusive only because the series is short
    (3 runs: MDE in the thousands of %) and lies within that reach is kept: the estimate alone refused runs 4 and 5
    of a new EPYC series at TPOT +8.8/+9.3 % against 3 stored runs, and vLLM runs at +12 to +26 % against 5 whose
    TPOT spans 57 %, which would keep only a young series' faster runs."""
    s = 1.0 if v.direction == "lower_is_better" else -1.0
    if not (v.kind == "inconclusive" and v.ratio is not None and math.expm1(s * math.log(v.ratio)) > v.threshold):
        return False
    from perfsuite.verdict.runs import index
    from perfsuite.verdict.values import run_value, within_run_var

    mine, base = index([data])[0].get(v.test), index(stored)[0].get(v.test)
    if not mine or not base:
        return True
    cur = mine[-1]
    inner = within_run_var(cur, v.metric)
    typical = sorted(x for b in base if (x := within_run_var(b, v.metric)) is not None)
    if inner is not None and typical and inner > NOISY_INSIDE * typical[len(typical) // 2]:
        return True
    now = run_value(cur, v.metric)
    logs = [s * math.log(x) for b in base if (x := run_value(b, v.metric)) is not None and x > 0]
    if now is None or now <= 0 or not logs:
        return True
    return s * math.log(now) > max(logs) + max(math.log1p(v.threshold), max(logs) - min(logs))


def outlier(ps: PerfSession, data: dict[str, Any]) -> str | None:
    """The gate's own test of the new run against the stored ones: a run much slower than them was most likely
    disturbed (two recordings at once, a busy neighbour) and must not become a baseline silently."""
    from perfsuite.verdict import report
    from perfsuite.verdict.runs import compare_runs
    from perfsuite.verdict.screen import is_contended

    try:
        runs = baselines.read_runs(ps.baseline_dir, ps.runner_class)
    except baselines.BaselineError:
        return None
    runs = [r for r in runs if not is_contended(r)]
    if len(runs) < 3:
        return None
    runs = ps.gate_config.newest(runs)
    verdicts = compare_runs(runs, [data], ps.gate_config)
    slower = [v for v in verdicts if not v.exact and (v.failed or _slower_and_noisy(v, data, runs))]
    if not slower:
        return None
    why = "; ".join(f"{v.test.split('::')[-1]} {report.describe(v)}" for v in slower[:3])
    if ps.settings.config.preflight.on_busy == "mark":
        data.setdefault("machine_info", {}).setdefault("perfsuite", {})["contended"] = {"outlier": why}
        ps.notes.append(f"perfsuite: recording a run marked contended (the gate will not use it): {why}")
        return None
    return (f"perfsuite: not recording a baseline: this run is slower than the {len(runs)} stored run(s) of "
            f"{ps.runner_class}, so the machine was probably disturbed: {why}. Re-run on a quiet machine; if the "
            f"slowdown is real and intended, start a new series (git mv {ps.baseline_dir} "
            f"{ps.baseline_dir}-before-<change>) and record again")
