"""Profile `cells`: explicit cells beyond the cross product of the axes (the pr profile's vLLM TP=2 and AWQ cells)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsuite.facts import config as cfg

ROOT = Path(__file__).resolve().parents[2]


def _settings(profile: str, backends: str | None = None, models: str | None = None) -> cfg.Settings:
    conf = cfg.load(ROOT / "pyproject.toml", ROOT)
    return cfg.resolve(conf, profile=profile, device="cpu", backends=backends, models=models,
                       runner_class="cpu-test-2c", update_baselines=False)


def test_pr_profile_gains_a_vllm_tp2_and_an_awq_cell() -> None:
    ids = [c.id for c in _settings("pr").cells()]
    assert "vllm-tiny-llama-float32-b1-p64-n32-tp2" in ids
    assert "vllm-tiny-llama-bfloat16-b1-p64-n32-awq" in ids
    assert len([i for i in ids if i.endswith(("-tp2", "-awq"))]) == 2  # not crossed with the other axes
    awq = next(c for c in _settings("pr").cells() if c.id.endswith("-awq"))
    assert dict(awq.options) == {"kv_cache_space_gib": 1}  # the backend's options apply to extra cells too


def test_filters_apply_to_extra_cells() -> None:
    assert not [c for c in _settings("pr", backends="torch").cells() if c.backend == "vllm"]
    assert not [c for c in _settings("pr", models="tiny-opt").cells() if c.id.endswith(("-tp2", "-awq"))]


@pytest.mark.parametrize("cell, match", [
    ({"backend": "vllm", "model": "tiny-llama", "dtype": "float32"}, "scenario: missing"),
    ({"backend": "vllm", "model": "m", "dtype": "float32", "scenario": "short", "tp": 2}, "unknown key"),
    ({"backend": "vlm", "model": "m", "dtype": "float32", "scenario": "short"}, "'vlm' is not one of"),
    ({"backend": "vllm", "model": "m", "dtype": "float32", "scenario": "huge"}, "'huge' is not one of"),
    ({"backend": "vllm", "model": "m", "dtype": "float32", "scenario": "short", "quantization": "gptq"}, "gptq"),
    ({"backend": "vllm", "model": "m", "dtype": "float32", "scenario": "short", "tensor_parallel_size": 0},
     "integer >= 1"),
])
def test_bad_extra_cell(cell: dict, match: str) -> None:
    raw = {"profiles": {"pr": {"backends": ["vllm"], "cells": [cell]}}}
    with pytest.raises(cfg.ConfigError, match=match):
        cfg.parse(raw, ROOT)
