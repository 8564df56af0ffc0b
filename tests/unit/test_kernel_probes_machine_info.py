"""Every run's machine_info says which kernels its machine had: the cached probe answers, probed when recording."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from perfsuite import plugin
from perfsuite.machine import kernel_probes as kp
from perfsuite.machine import kernel_probes_run as kpr

ANSWERS = {n: kp.ProbeResult(n, n != "vllm.cpu_gemm_wna16", f"answer of {n}") for n in kp.PROBES}


@pytest.fixture
def no_subprocess(monkeypatch):
    def refuse(timeout_s: float) -> Any:
        raise AssertionError("a probe subprocess was started")

    monkeypatch.setattr(kpr, "run_subprocess", refuse)


def _warm(cache_dir) -> None:
    path = kpr._cache_file(cache_dir)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"results": {n: r.as_dict() for n, r in ANSWERS.items()}}))


def test_a_warm_cache_is_recorded_without_a_subprocess(tmp_path, no_subprocess):
    _warm(tmp_path)
    got = kpr.machine_info(tmp_path, environ={})
    assert got["vllm.cpu_gemm_wna16"] == {"present": False, "detail": "answer of vllm.cpu_gemm_wna16",
                                          "source": "cached"}
    assert set(got) == set(kp.PROBES) and got["torch.inductor_cxx"]["present"] is True


def test_a_cold_cache_is_named_not_probed_unless_recording(tmp_path, no_subprocess, monkeypatch):
    got = kpr.machine_info(tmp_path, environ={})
    assert set(got) == {"not_probed"} and "perfsuite doctor" in got["not_probed"] and str(tmp_path) in got["not_probed"]
    monkeypatch.setattr(kpr, "run_subprocess", lambda timeout_s: (dict(ANSWERS), True))
    got = kpr.machine_info(tmp_path, probe=True, environ={})  # a baseline recording probes, and fills the cache
    assert got["vllm.cpu_gemm_wna16"]["present"] is False and got["vllm.cpu_gemm_wna16"]["source"] == "measured"
    assert kpr.cached(tmp_path) is not None


def test_injected_answers_are_recorded_as_injected(tmp_path, no_subprocess):
    _warm(tmp_path)
    got = kpr.machine_info(tmp_path, environ={kp.ENV: "vllm.cpu_gemm_wna16=present"})
    assert got["vllm.cpu_gemm_wna16"]["present"] is True and got["vllm.cpu_gemm_wna16"]["source"] == "injected"
    assert got["torch.inductor_cxx"]["source"] == "cached"


def test_a_failing_probe_never_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(kpr, "run_subprocess", lambda timeout_s: 1 / 0)
    assert kpr.machine_info(tmp_path, probe=True, environ={}) == {"error": "ZeroDivisionError: division by zero"}


def test_the_plugin_records_them_in_machine_info(tmp_path, no_subprocess, monkeypatch):
    monkeypatch.setenv("PERFSUITE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(kp.ENV, raising=False)
    _warm(tmp_path)
    settings = SimpleNamespace(profile=SimpleNamespace(name="smoke"), device="cpu", update_baselines=False)
    session = SimpleNamespace(runner_class="cpu-x-avx2-2c", settings=settings, facts={}, load=None, peaks=None)
    config = SimpleNamespace(stash={plugin.SESSION_KEY: session})
    mi: dict[str, Any] = {}
    plugin.pytest_benchmark_update_machine_info(config, mi)  # type: ignore[arg-type]
    assert mi["perfsuite"]["kernels"]["vllm.cpu_gemm_wna16"]["source"] == "cached"
