"""Per-token latency of every cell of the selected profile (see ``[tool.perfsuite]`` in pyproject.toml).

Ids read as the cell: ``test_tpot[torch-tiny-llama-float32-b1-p64-n32]``. pytest-benchmark's statistics are
per-token latencies: one round is one prefill (TTFT), one decode step (TPOT) or one generation (E2EL).
The values are timed in fresh worker processes (perfsuite.orchestrate.plan); these tests record them and gate them.
"""

import pytest

pytestmark = pytest.mark.perf


def test_ttft(benchmark, perf, request):
    """Time to first token: prefill of the batch until the first tokens are on the host."""
    perf.run("ttft", benchmark, request)


def test_tpot(benchmark, perf, request):
    """Time per output token: one decode step (one token per sequence), contexts spread over the generation."""
    perf.run("tpot", benchmark, request)


def test_e2el(benchmark, perf, request):
    """End-to-end latency of one generation (prefill + n-1 decode steps); vLLM calls it e2el."""
    perf.run("e2el", benchmark, request)
