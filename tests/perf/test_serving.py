"""Serving under load: vLLM's OpenAI server started per (model, dtype, prefix caching) and start, driven by the
profile's load points (``[tool.perfsuite.serving.<profile>]`` in pyproject.toml; docs/serving.md).

Ids read as the cell: ``test_ttft_under_load[vllm-serve-tiny-llama-float32-pc-random-i64-o16-poisson-r4-n16]``.
pytest-benchmark's rounds are per request (TTFT, TPOT, E2EL) or per streamed chunk (ITL); a replicate is a server
start. The smoke profile (the default, and CI's) has no serving points: each of the four tests is then collected once,
as ``[none]``, and skipped with the reason (profile smoke has no ``[tool.perfsuite.serving.smoke]``), so CI runs no
server here; the serving code's own tests are in tests/serve, and ``--perf-profile pr`` runs these.
"""

import pytest

from perfsuite.adapters.pytest import serving as record
from perfsuite.adapters.pytest.hooks import SESSION_KEY
from perfsuite.facts.cells import param_of
from perfsuite.measure.serving import cell as serve_cell

pytestmark = [pytest.mark.perf, pytest.mark.slow]


def _conf(config: pytest.Config) -> serve_cell.ServingConfig:
    session = config.stash[SESSION_KEY]
    from perfsuite.facts import config as cfg

    try:
        return serve_cell.load(cfg.find_pyproject(session.settings.config.root), session.settings.profile.name)
    except ValueError as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None


def pytest_generate_tests(metafunc):
    if "serve_cell" in metafunc.fixturenames:
        session = metafunc.config.stash[SESSION_KEY]
        cells = record.selected(session, _conf(metafunc.config))
        name = session.settings.profile.name
        params = [pytest.param(c, id=c.id) for c in cells] or [pytest.param(None, id="none", marks=pytest.mark.skip(
            reason=f"no serving cells selected (profile {name}: [tool.perfsuite.serving.{name}])"))]
        metafunc.parametrize("serve_cell", params, scope="module")


@pytest.fixture(scope="session")
def serve_measurements(request, perf_session):
    """Every selected serving cell, measured once per session (each server start runs all its points)."""
    from perfsuite.machine import preflight

    conf = _conf(request.config)
    cells = {}
    for item in request.session.items:
        c = param_of(item, "serve_cell")
        if c is not None:
            cells.setdefault(c.id, c)
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")

    def say(line):
        if tr is not None and capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(line)

    say(f"\nperfsuite: {len(cells)} serving cell(s), {conf.server_starts} server start(s) per server")
    lock = None if perf_session.lock is not None else preflight.SuiteLock(exclusive=False).acquire()
    try:
        out = serve_cell.measure(list(cells.values()), conf, perf_session.settings.config.cache_dir, say=say)
    finally:
        if lock is not None:
            lock.release()
    record.add_to_gate_family(perf_session, request.session.items)
    return conf, out


@pytest.fixture
def serving(serve_measurements, serve_cell):
    conf, out = serve_measurements
    return conf, out[serve_cell.id]


def test_ttft_under_load(benchmark, perf_session, serving, request):
    """Time to first token of each request under the point's load (vLLM's definition: send to first chunk)."""
    record.record(perf_session, serving[1], serving[0], benchmark, request)


def test_tpot_under_load(benchmark, perf_session, serving, request):
    """Time per output token of each request, first token excluded: (e2el - ttft) / (tokens - 1)."""
    record.record(perf_session, serving[1], serving[0], benchmark, request)


def test_itl_under_load(benchmark, perf_session, serving, request):
    """Inter-token latency: every gap between streamed chunks."""
    record.record(perf_session, serving[1], serving[0], benchmark, request)


def test_e2el_under_load(benchmark, perf_session, serving, request):
    """End-to-end latency of each request: send to its last chunk."""
    record.record(perf_session, serving[1], serving[0], benchmark, request)
