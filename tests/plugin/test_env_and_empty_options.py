"""Knobs that would be silently ignored are usage errors: a thread count the OpenMP runtime cannot read
(``OMP_NUM_THREADS=abc`` runs on every core without a word) and an empty ``--perf-*=`` (which ran the default)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.machine import precheck

ROOT = Path(__file__).resolve().parents[2]


def _pytest(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "pytest", "tests/perf", "-q", "-p", "no:cacheprovider",
                           "--collect-only", *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("name", "value", "ok"), [
    ("OMP_NUM_THREADS", "abc", False), ("OMP_NUM_THREADS", "0", False), ("OMP_NUM_THREADS", "2.5", False),
    ("OMP_NUM_THREADS", "2", True), ("OMP_NUM_THREADS", "4,2", True), ("OMP_NUM_THREADS", " 2 ", True),
    ("MKL_NUM_THREADS", "many", False), ("OPENBLAS_NUM_THREADS", "1", True),
])
def test_thread_counts(name: str, value: str, ok: bool) -> None:
    if ok:
        precheck.check_thread_env({name: value})
    else:
        with pytest.raises(precheck.PreflightError, match=rf"^{name}='{value}': not a thread count"):
            precheck.check_thread_env({name: value})


def test_a_bad_omp_num_threads_is_a_usage_error() -> None:
    p = _pytest(OMP_NUM_THREADS="abc")
    assert p.returncode == 4, p.stdout[-1500:] + p.stderr[-1500:]
    assert "perfsuite: OMP_NUM_THREADS='abc': not a thread count" in p.stderr, p.stderr


def test_an_empty_option_is_a_usage_error_naming_it() -> None:
    p = _pytest("--perf-workers=")
    assert p.returncode == 4, p.stdout[-1500:] + p.stderr[-1500:]
    assert "--perf-workers: empty; give a value or leave the option out" in p.stderr, p.stderr


def test_a_mistyped_kernel_probe_injection_is_a_usage_error_at_start() -> None:
    """It failed each affected cell in its worker, one line each; now pytest stops before collecting anything."""
    p = _pytest(PERFSUITE_KERNEL_PROBES="vllm.cpu_gemm_wn16=absent")
    assert p.returncode == 4, p.stdout[-1500:] + p.stderr[-1500:]
    line = next(x for x in p.stderr.splitlines() if "PERFSUITE_KERNEL_PROBES" in x)
    assert "unknown probe 'vllm.cpu_gemm_wn16'" in line and "vllm.cpu_gemm_wna16, vllm.cpu_shm_allreduce" in line, line
    p = _pytest(PERFSUITE_KERNEL_PROBES="torch.inductor_cxx=gone")
    assert p.returncode == 4 and "the answer must be present or absent, not 'gone'" in p.stderr, p.stderr
