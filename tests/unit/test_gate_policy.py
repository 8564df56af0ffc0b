"""[tool.perfsuite.gate] parsing: defaults, overrides, and errors that name the key, the allowed values, the fix."""

from __future__ import annotations

import pytest

from perfsuite.verdict.policy import DEFAULT_POLICIES, GateConfig, Policy, PolicyError, load_config, parse_config


def test_defaults() -> None:
    cfg = parse_config({})
    assert cfg == GateConfig()
    assert cfg.policies == DEFAULT_POLICIES
    assert parse_config(None).alpha == 0.01


def test_full_schema() -> None:
    cfg = parse_config({
        "alpha": 0.05, "power": 0.9, "baseline_runs": 8, "ab_threshold": 0.02, "ab_margin": 0.04,
        "policies": [
            {"metric": "median_tpot_ms", "threshold": 0.05, "tests": ["test_tpot*"]},
            {"metric": "output_throughput_tokens_per_s", "threshold": 0.05},
            {"metric": "generated_tokens", "exact": True},
            {"metric": "peak_rss_bytes", "tolerance": 0.1},
        ],
        "overrides": {"onnxruntime-cpu-*": {"threshold": 0.1, "peak_rss_bytes": {"tolerance": 0.2}}},
    })
    assert cfg.alpha == 0.05 and cfg.baseline_runs == 8 and cfg.ab_threshold == 0.02 and cfg.ab_margin == 0.04
    thr = cfg.policies[1]
    assert thr.direction == "higher_is_better"  # from the metric's name
    assert cfg.policies[2].direction == "equal" and cfg.policies[2].exact
    assert cfg.policies[3].exact and cfg.policies[3].direction == "lower_is_better"
    ort = {p.metric: p for p in cfg.policies_for("onnxruntime-cpu-tiny-llama-float32-b1-p64-n32", "test_tpot[x]")}
    assert ort["median_tpot_ms"].threshold == 0.1
    assert ort["peak_rss_bytes"].tolerance == 0.2
    assert ort["generated_tokens"].tolerance == 0.0  # a threshold override never touches exact metrics
    torch = {p.metric: p for p in cfg.policies_for("torch-tiny-llama-float32-b1-p64-n32", "test_tpot[x]")}
    assert torch["median_tpot_ms"].threshold == 0.05
    assert "median_tpot_ms" not in {p.metric for p in cfg.policies_for("torch-x", "test_ttft[x]")}


def test_override_can_disable() -> None:
    cfg = parse_config({"policies": [{"metric": "median_tpot_ms"}],
                        "overrides": {"vllm-*": {"enabled": False}}})
    assert cfg.policies_for("vllm-tiny", "test_tpot[vllm-tiny]") == []
    assert len(cfg.policies_for("torch-tiny", "test_tpot[torch-tiny]")) == 1


@pytest.mark.parametrize(("raw", "words"), [
    ({"alhpa": 0.01}, ["alhpa", "allowed", "alpha", "remove or rename"]),
    ({"alpha": 0.7}, ["alpha", "(0, 0.5)"]),
    ({"alpha": "0.01"}, ["alpha", "a number"]),
    ({"baseline_runs": 0}, ["baseline_runs", "an integer"]),
    ({"baseline_runs": 2.5}, ["baseline_runs", "an integer"]),
    ({"ab_margin": 0}, ["ab_margin", "(0, 1)"]),
    ({"between_run_cv": 0.02}, ["between_run_cv", "remove or rename"]),
    ({"policies": []}, ["policies", "non-empty"]),
    ({"policies": [{"threshold": 0.1}]}, ["policies[0].metric", "median"]),
    ({"policies": [{"metric": "median_tpt_ms"}]}, ["policies[0].metric", "median_tpot_ms", "{mean,median"]),
    ({"policies": [{"metric": "median_tpot_ms", "direction": "down"}]},
     ["policies[0].direction", "lower_is_better, higher_is_better"]),
    ({"policies": [{"metric": "median_tpot_ms", "threshold": -0.1}]}, ["policies[0].threshold", "[0, 1)"]),
    ({"policies": [{"metric": "median_tpot_ms", "tolerance": 0.1}]}, ["tolerance", "only with exact = true"]),
    ({"policies": [{"metric": "generated_tokens", "threshold": 0.1}]}, ["threshold", "tolerance"]),
    ({"policies": [{"metric": "generated_tokens", "exact": False}]}, ["exact", "true"]),
    ({"policies": [{"metric": "median_tpot_ms", "tests": []}]}, ["tests", "glob"]),
    ({"policies": [{"metric": "median_tpot_ms", "treshold": 0.1}]}, ["treshold", "threshold"]),
    ({"policies": [{"metric": "median_tpot_ms"}, {"metric": "median_tpot_ms"}]}, ["policies", "duplicate"]),
    ({"overrides": {"x-*": {"thresold": 0.1}}}, ['overrides."x-*".thresold', "threshold"]),
    ({"overrides": {"x-*": {"median_tpot_ms": {"threshold": 2}}}}, ["threshold", "[0, 1)"]),
    ({"overrides": {"x-*": {"p99_itl_ms": {"threshold": 0.1}}}}, ["p99_itl_ms", "add a policy"]),
])
def test_errors_name_key_allowed_and_fix(raw: dict, words: list[str]) -> None:
    with pytest.raises(PolicyError) as info:
        parse_config(raw)
    msg = str(info.value)
    assert "[tool.perfsuite.gate]" in msg and "\n" not in msg
    for w in words:
        assert w in msg
    assert isinstance(info.value, ValueError)


def test_policy_is_frozen() -> None:
    p = Policy("median_tpot_ms")
    with pytest.raises(AttributeError):
        p.threshold = 0.5  # type: ignore[misc]


def test_load_config_reads_pyproject(tmp_path) -> None:
    f = tmp_path / "pyproject.toml"
    f.write_text('[tool.perfsuite]\n[tool.perfsuite.gate]\nalpha = 0.02\n[[tool.perfsuite.gate.policies]]\n'
                 'metric = "min_itl_ms"\nthreshold = 0.02\n')
    cfg = load_config(f, baseline_runs=7)
    assert cfg.alpha == 0.02 and cfg.baseline_runs == 7 and cfg.policies[0].metric == "min_itl_ms"
    f.write_text("[tool.perfsuite\n")
    with pytest.raises(PolicyError, match="cannot read"):
        load_config(f)
