"""Every workflow: GitHub's schema, zizmor's audits, pins and permissions, and its ``run:`` steps run here on the
CPU (tests/workflows/simulate.py says exactly what stands in for what)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import simulate as simu

ROOT = simu.ROOT
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
NAMES = [p.name for p in WORKFLOWS]


def _tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        pytest.fail(f"{name} is not installed; it is in the `test` extra: pip install -e '.[test]'")
    return found


def test_the_three_workflows_are_there() -> None:
    assert {"ci.yml", "nightly-rocm.yml", "pr-gate.yml"} <= set(NAMES)


def test_every_workflow_validates_against_githubs_schema(tmp_path: Path) -> None:
    proc = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # and the check itself bites: a job without runs-on is refused
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\non: push\njobs:\n  x:\n    steps:\n      - run: echo\n")
    proc = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1


def _zizmor(*paths: Path, persona: str = "regular") -> list[dict]:
    proc = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", "--format", "json", "--persona", persona,
                           *map(str, paths)], capture_output=True, text=True)
    assert proc.stdout.strip().startswith("["), proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def _severity(f: dict) -> str:
    return str(f.get("determinations", {}).get("severity", "")).lower()


def test_zizmor_finds_nothing_medium_or_high(tmp_path: Path) -> None:
    found = [f for f in _zizmor(*WORKFLOWS) if _severity(f) in ("medium", "high")]
    assert found == [], [(f["ident"], f["desc"]) for f in found]
    # pedantic: not even a low or informational finding today
    assert [f["ident"] for f in _zizmor(*WORKFLOWS, persona="pedantic")] == []
    # the audit bites: the old pr-gate's template injection and unpinned action are found
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\non: pull_request\npermissions: {}\njobs:\n  x:\n    runs-on: ubuntu-24.04\n"
                   "    steps:\n      - uses: actions/checkout@v4\n        with:\n          persist-credentials: false\n"
                   "      - run: git worktree add ../main-tree origin/${{ github.base_ref }}\n")
    idents = {f["ident"] for f in _zizmor(bad) if _severity(f) in ("medium", "high")}
    assert {"template-injection", "unpinned-uses"} <= idents


@pytest.mark.parametrize("name", NAMES)
def test_pins_permissions_and_loud_installs(name: str) -> None:
    text = (ROOT / ".github" / "workflows" / name).read_text()
    wf = simu.load(name)
    assert wf.get("permissions") == {}, "top-level permissions: {} and grant per job"
    for job_id, job in wf["jobs"].items():
        assert "permissions" in job, f"{job_id}: no job-level permissions"
        image = (job.get("container") or {}).get("image")
        if image:
            assert re.search(r"@sha256:[0-9a-f]{64}$", image), f"{job_id}: container image not pinned by digest"
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False
    for line in text.splitlines():
        if "uses:" in line:
            assert re.search(r"@[0-9a-f]{40}  # v\d+\.\d+\.\d+$", line), f"name the tag of a pin: {line.strip()}"
    assert "|| true" not in text, "an optional install must fail loudly"
    assert "${{" not in "".join(s.get("run", "") for j in wf["jobs"].values() for s in j["steps"]), \
        "pass expressions to run: through env (template injection)"


@pytest.mark.slow
def test_ci_yml_steps_run_here(tmp_path: Path) -> None:
    """ci.yml as CI runs it; the suite itself only collects here (it is the suite running this test)."""
    sim = simu.Sim(tmp_path, simu.load("ci.yml"), "ci.yml", env_overrides={"PYTEST_ADDOPTS": "--collect-only -q"})
    simu.run_job(sim, "test")
    log = simu.calls(sim)
    # scripts/install.sh installs with uv when `pip install uv` works (here: always), else with pip
    assert any(c == "uv-install .[cpu,test]" or c.startswith("pip install --disable-pip-version-check -q -e .[cpu,test]")
               for c in log), log


def _model_cache_env() -> dict[str, str]:
    cache = os.environ.get("PERFSUITE_CACHE_DIR")
    return {"PERFSUITE_CACHE_DIR": cache} if cache else {}


@pytest.mark.slow
@pytest.mark.alone  # records a baseline: refused beside another test's processes
def test_nightly_records_a_first_baseline_then_gates_merges_and_reports(tmp_path: Path) -> None:
    """Two simulated nights on a runner class with no baseline: night 1 records one, night 2 compares with it;
    both merge into one history (kept in the cache) and one report. The torch shard (2 of 3 on the smoke
    profile) stands for the matrix: every shard runs the same steps on other cells."""
    wf = simu.load("nightly-rocm.yml")
    entries = simu.matrix_entries(wf["jobs"]["bench"])
    assert [e["shard"] for e in entries] == list(range(1, int(wf["env"]["SHARDS"]) + 1)), "SHARDS != matrix"
    entry = next(e for e in entries if e["shard"] == 2)
    new_class = "sim-cpu-new-runner-2c"
    # 3 worker processes instead of the profile's 10: what is under test is the job's record/gate/merge/report
    # steps, not the statistics of a run (the plugin reads PERFSUITE_WORKERS as --perf-workers; the step passes none)
    env = {"PERFSUITE_RUNNER_CLASS": new_class, "PERFSUITE_WORKERS": "3", **_model_cache_env()}
    recorded = None
    for night in (1, 2):
        base = tmp_path / f"night{night}"
        sim = simu.Sim(base, wf, "nightly-rocm.yml", env_overrides=env,
                       extra_files={f"baselines/{new_class}/{recorded.name}": recorded} if recorded else {})
        if night == 2:
            shutil.copytree(tmp_path / "night1" / "cache", sim.cache)
        simu.run_job(sim, "bench", entry)
        sim.results["bench"] = "success"
        label = f"{entry['runner']}-{entry['shard']}"
        runs = list((sim.artifacts / f"nightly-{label}").glob("nightly-*.json"))
        assert len(runs) == 1
        data = json.loads(runs[0].read_text())
        assert {b["extra_info"]["cell"]["id"] for b in data["benchmarks"]} == {"torch-tiny-llama-float32-b1-p64-n32"}
        new_baselines = list((sim.artifacts / f"new-baselines-{label}").glob(f"{new_class}/*.json"))
        if night == 1:
            assert len(new_baselines) == 1, "the first run of a new runner class records its baseline"
            recorded = new_baselines[0]
        else:
            assert new_baselines == [], "with a baseline the nightly gates instead of recording"
        assert any("onnxruntime-migraphx" in c for c in simu.calls(sim)), "the MIGraphX install is a step"
        assert simu.job_condition(sim, "merge")
        outs = simu.run_job(sim, "merge")
        assert outs == {"regression": "false"}
        report = sim.artifacts / "perf-report"
        assert (report / "perf-report" / "report.html").is_file() and (report / "changepoints.json").is_file()
        summary = (base / "summary-merge.md").read_text()
        assert summary.startswith("# nightly-rocm") and "torch-tiny-llama-float32-b1-p64-n32" in summary
        assert f"{night} run(s) in" in summary, "the history grows night by night through the cache"
        assert "too short for detection" in summary
        assert not simu.job_condition(sim, "confirm")


@pytest.fixture
def two_tree_ab() -> None:
    """Asked when a test that needs it runs (slow tier), not at collection: an interpreter reading ``ab --help``."""
    proc = subprocess.run([sys.executable, "-m", "perfsuite.cli", "ab", "--help"], capture_output=True, text=True,
                          cwd=ROOT)
    if not ("--budget" in proc.stdout and "--a-python" in proc.stdout and "--b " in proc.stdout):
        pytest.skip("`perfsuite ab --a TREE --b TREE --budget` (issue 10) is not in this tree yet; the pr-gate/confirm "
                    "steps call it")


needs_two_tree_ab = pytest.mark.usefixtures("two_tree_ab")


@pytest.mark.slow
@needs_two_tree_ab
def test_pr_gate_runs_a_two_tree_ab_and_reports(tmp_path: Path) -> None:
    sim = simu.Sim(tmp_path, simu.load("pr-gate.yml"), "pr-gate.yml",
                   env_overrides={"PERFSUITE_BACKEND": "torch", **_model_cache_env()})
    simu.run_job(sim, "ab")
    assert (sim.artifacts / "pr-gate" / "ab.json").is_file()
    assert "pr-gate A/B" in (tmp_path / "summary-ab.md").read_text()


@pytest.mark.slow
@needs_two_tree_ab
def test_nightly_confirms_a_change_point_by_ab(tmp_path: Path) -> None:
    wf = simu.load("nightly-rocm.yml")
    probe = tmp_path / "probe"
    probe.mkdir()
    simu.checkout(probe)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=probe, capture_output=True, text=True).stdout.strip()
    sim = simu.Sim(tmp_path / "sim", wf, "nightly-rocm.yml",
                   env_overrides={"PERFSUITE_BACKEND": "torch", **_model_cache_env()})
    report = sim.artifacts / "perf-report"
    report.mkdir(parents=True)
    (report / "changepoints.json").write_text(json.dumps({"findings": [
        {"kind": "regression", "commit_before": head, "commit_after": head,
         "cell_id": "torch-tiny-llama-float32-b1-p64-n32"}], "notes": []}))
    sim.outputs["merge"] = {"regression": "true"}
    sim.results["merge"] = "success"
    assert simu.job_condition(sim, "confirm")
    outs = simu.run_job(sim, "confirm")
    assert outs["confirmed"] == "false", "an A/A of one commit must not confirm a regression"


def test_a_confirmed_regression_opens_an_issue_and_fails(tmp_path: Path) -> None:
    sim = simu.Sim(tmp_path, simu.load("nightly-rocm.yml"), "nightly-rocm.yml")
    (sim.artifacts / "perf-report" / "perf-report").mkdir(parents=True)
    (sim.artifacts / "perf-report" / "perf-report" / "summary.md").write_text("# nightly-rocm\n")
    (sim.artifacts / "ab-confirm").mkdir()  # the confirm job's artifact: its bisect's answer goes into the issue
    (sim.artifacts / "ab-confirm" / "bisect.txt").write_text("first bad commit 0123456789ab: load the model with "
                                                             "eager attention\n")
    sim.outputs.update(merge={"regression": "true"}, confirm={"confirmed": "true"})
    sim.results.update(merge="success", confirm="success")
    assert simu.job_condition(sim, "issue")
    with pytest.raises(simu.StepFailed, match="exited 1"):
        simu.run_job(sim, "issue")
    [gh] = [c for c in simu.calls(sim) if c.startswith("gh ")]
    assert "issue create --repo perfsuite/perfsuite" in gh and "--body-file issue.md" in gh
    body = (tmp_path / "runs" / "issue-" / "repo" / "issue.md").read_text()
    assert "## perfsuite bisect" in body and "first bad commit 0123456789ab" in body and "# nightly-rocm" in body
    sim.outputs["confirm"] = {"confirmed": "false"}
    assert not simu.job_condition(sim, "issue")


def test_the_simulator_fails_a_broken_step(tmp_path: Path) -> None:
    wf = {"jobs": {"x": {"steps": [{"name": "typo", "run": "perfsuite histroy show"}]}}}
    with pytest.raises(simu.StepFailed, match="typo"):
        simu.run_job(simu.Sim(tmp_path, wf, "broken.yml"), "x")
    checkout = {"uses": "actions/checkout@" + "0" * 40, "with": {"persist-credentials": False}}
    wf = {"jobs": {"x": {"steps": [checkout, {"run": 'python -m pip install -e ".[no-such-extra]"'}]}}}
    with pytest.raises(simu.StepFailed, match="declares no extra"):
        simu.run_job(simu.Sim(tmp_path / "b", wf, "broken.yml"), "x")
