"""The plugin end to end, in subprocesses (pytester) on a small tiny-llama scenario."""

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """
[tool.perfsuite]
[tool.perfsuite.backend_options.vllm]
kv_cache_space_gib = 1
baselines_dir = "baselines"
[tool.perfsuite.scenarios]
tiny = {{ batch_size = 2, prompt_tokens = 16, new_tokens = {n} }}
[tool.perfsuite.profiles.smoke]
backends = ["{backend}"]
models = ["tiny-llama"]
scenarios = ["tiny"]
warmup_generations = 1
generations = {g}
"""

CELL = "{backend}-tiny-llama-float32-b2-p16-n{n}"


@pytest.fixture
def project(pytester):
    def make(n=4, g=3, backend="torch"):
        pytester.makefile(".toml", pyproject=PYPROJECT.format(n=n, g=g, backend=backend))
        (pytester.path / "tests" / "perf").mkdir(parents=True)
        shutil.copy(ROOT / "tests" / "perf" / "test_latency.py", pytester.path / "tests" / "perf")
        return pytester

    return make


def run(pytester, *args):
    return pytester.runpytest_subprocess("tests/perf", "-p", "no:cacheprovider", "-q", *args)


def test_help_lists_perf_options(pytester):
    out = pytester.runpytest_subprocess("--help").stdout.str()
    for flag in ("--perf-backend", "--perf-model", "--perf-profile", "--perf-device", "--perf-runner-class",
                 "--perf-update-baselines"):
        assert flag in out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "onnxruntime-cpu", "vllm"])
def test_perf_run_is_per_token_and_self_consistent(project, backend):
    n, g = 8, 4
    p = project(n=n, g=g, backend=backend)
    res = run(p, "--benchmark-json=out.json")
    res.assert_outcomes(passed=3)
    data = json.loads((p.path / "out.json").read_text())
    by = {b["name"].split("[")[0]: b for b in data["benchmarks"]}
    cell = CELL.format(n=n, backend=backend)
    assert set(by) == {"test_ttft", "test_tpot", "test_e2e"}
    assert all(b["param"] == cell for b in by.values())
    assert data["machine_info"]["perfsuite"]["schema_version"] == 1
    ttft, tpot, e2e = by["test_ttft"], by["test_tpot"], by["test_e2e"]
    # pytest-benchmark's own stats are per token: a TPOT round is one decode step.
    assert ttft["stats"]["rounds"] == g and e2e["stats"]["rounds"] == g and tpot["stats"]["rounds"] == g * (n - 1)
    assert tpot["extra_info"]["generated_tokens"] == 2 * g * (n - 1)
    assert e2e["extra_info"]["generated_tokens"] == 2 * g * n
    ei = e2e["extra_info"]
    for key in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "output_throughput_tokens_per_s",
                "peak_rss_bytes"):
        assert key in ei
    # Inside an E2E round, e2el = ttft + sum(itl) up to the timer calls between them.
    s = ei["samples"]
    for k in range(g):
        parts = s["ttft_ms"][k] + sum(s["itl_ms"][k * (n - 1):(k + 1) * (n - 1)])
        assert parts == pytest.approx(s["e2el_ms"][k], rel=0.02)
    # Across the three tests (separate rounds of one process): e2e ~ ttft + (n-1) * tpot. The bound is a factor
    # of 2 because this VM switches between a fast and a slow mode for seconds at a time (per-generation TPOT of
    # tiny-llama 1.8 vs 3.3 ms inside one process: benchmarks/data/gate_corpus 0006, 0028), so two tests of one
    # process can differ by ~1.8x; a 20 % bound failed 1 run in ~5 here. A factor of 2 still catches a unit slip
    # (x1000) and per-generation vs per-token timing (x7 at n = 8); an n vs n-1 slip is caught exactly by the
    # round and token counts above.
    predicted = ttft["stats"]["median"] + (n - 1) * tpot["stats"]["median"]
    assert predicted / 2 < e2e["stats"]["median"] < predicted * 2
    if backend == "vllm":
        # Our per-request TPOT against vLLM's own (last_token_ts - first_token_ts) / (n - 1), same generation:
        # both time the same engine steps, measured agreement 0.1 %; 2 % allows a busy CI neighbour.
        bi = ei["backend_info"]
        for ours, theirs in zip(bi["last_request_timings"], bi["last_vllm_request_stats"], strict=True):
            assert ours["tpot_s"] == pytest.approx(theirs["tpot_s"], rel=0.02)
        assert bi["engine_start_s"] > 0


@pytest.mark.slow
def test_baseline_record_compare_and_refusals(project):
    p = project(n=3, g=2)
    res = run(p, "--perf-update-baselines")
    res.assert_outcomes(passed=3)
    (rc_dir,) = (p.path / "baselines").iterdir()
    (first,) = rc_dir.iterdir()
    assert first.name.startswith("0001_smoke") and "recorded baseline" in res.stdout.str()
    assert json.loads(first.read_text())["benchmarks"][0]["stats"]["data"]  # raw rounds kept

    # Compare finds this class's baseline with no extra flag.
    res = run(p, "--benchmark-compare")
    res.assert_outcomes(passed=3)
    assert f"Comparing against benchmarks from: {rc_dir.name}/{first.name}" in res.stdout.str() + res.stderr.str()

    # A failing run with --perf-update-baselines writes nothing.
    (p.path / "tests" / "perf" / "test_zfail.py").write_text("def test_fails():\n    assert False\n")
    res = run(p, "--perf-update-baselines")
    res.assert_outcomes(passed=3, failed=1)
    assert [f.name for f in rc_dir.iterdir()] == [first.name]
    assert "no baseline written" in res.stdout.str()
    (p.path / "tests" / "perf" / "test_zfail.py").unlink()

    # Another runner class has no baseline here: a clear refusal, not a silent "nothing to compare".
    res = run(p, "--benchmark-compare", "--perf-runner-class", "rocm-gfx942-mi300x")
    assert res.ret == 4
    assert "no baseline for runner class 'rocm-gfx942-mi300x'" in res.stderr.str()

    # A baseline of another class named explicitly is refused by the compare hook.
    foreign = json.loads(first.read_text())
    foreign["machine_info"]["perfsuite"]["runner_class"] = "rocm-gfx90a-mi250x"
    other = p.path / "foreign.json"
    other.write_text(json.dumps(foreign))
    res = run(p, f"--benchmark-compare={other}", "--benchmark-storage=file://elsewhere")
    assert res.ret != 0
    assert "refusing to compare with a baseline of runner class 'rocm-gfx90a-mi250x'" in (
        res.stdout.str() + res.stderr.str())

    # A corrupt baseline is a one-line error naming the file and the fix; the file is left as it was.
    first.write_text('{"benchmarks": [')
    res = run(p, "--benchmark-compare")
    assert res.ret == 4
    err = res.stderr.str()
    assert "corrupt baseline" in err and first.name in err and "Traceback" not in err
    assert first.read_text() == '{"benchmarks": ['


def test_bad_options_and_config_are_usage_errors(project):
    p = project()
    res = run(p, "--perf-profile", "weekly")
    assert res.ret == 4 and "unknown profile; use one of smoke, pr, nightly" in res.stderr.str()
    (p.path / "pyproject.toml").write_text("[tool.perfsuite]\nbaseline_dir = 'x'\n")
    res = run(p)
    assert res.ret == 4 and "baseline_dir: unknown key" in res.stderr.str()
    assert "Traceback" not in res.stderr.str()


def test_unavailable_backend_skips_with_reason(project):
    p = project()
    # No GPU here: without an explicit runner class there is nothing to fingerprint (a usage error) ...
    res = run(p, "--perf-device", "cuda")
    assert res.ret == 4 and "sees no GPU" in res.stderr.str()
    # ... with one, every cell is skipped with the backend's own reason.
    res = run(p, "--perf-device", "cuda", "--perf-runner-class", "cuda-test", "-rs")
    res.assert_outcomes(skipped=3)
    assert "sees no GPU: torch.cuda.is_available() is False" in res.stdout.str()
