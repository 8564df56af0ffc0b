"""perfsuite.adapters.pytest.pbcompat against the installed pytest-benchmark: each private name it relies on, pinned.

An upgrade of pytest-benchmark that renames or changes ``config._benchmarksession`` (``machine_id``, ``storage``,
``compare``, ``handle_loading``, ``disabled``, ``options``), ``BenchmarkFixture._mode`` / ``_make_stats`` or
``Metadata.stats.as_dict()`` fails here first, not somewhere inside a perf run. Runs pytest in-process (pytester)
with perfsuite's own plugin off, so nothing is measured.
"""

from __future__ import annotations

import json

import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.session import BenchmarkSession
from pytest_benchmark.stats import Metadata, Stats

from perfsuite.adapters.pytest import pbcompat

CONFTEST = """
import pytest
from perfsuite.adapters.pytest import pbcompat

@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    bs = pbcompat.benchmark_session(session.config)
    assert bs is not None
    for name in ("machine_id", "storage", "compare", "handle_loading", "disabled", "options"):
        assert hasattr(bs, name), name
    assert hasattr(bs.storage, "default_machine_id") and "cprofile" in bs.options
    assert pbcompat.load_comparison(session.config, "pinned-class", session.config.getoption("pin_compare"))
    assert bs.machine_id == bs.storage.default_machine_id == "pinned-class"

def pytest_addoption(parser):
    parser.addoption("--pin-compare", action="store_true", default=[])
"""

TESTS = """
import json
import pytest
from perfsuite.adapters.pytest import pbcompat

def test_rounds(benchmark, request):
    assert not pbcompat.is_disabled(benchmark) and not pbcompat.session_disabled(request.config)
    pbcompat.record_rounds(benchmark, [0.001, 0.003, 0.002], "pinned mode")
    d = pbcompat.stats_dict(benchmark)
    assert d["rounds"] == 3 and d["median"] == pytest.approx(0.002) and d["mean"] == pytest.approx(0.002)
    if pbcompat.session_cprofile(request.config):
        import cProfile, pstats
        assert pbcompat.wants_cprofile(benchmark)
        prof = cProfile.Profile()
        prof.runcall(lambda: None)
        pbcompat.set_cprofile_stats(benchmark, pstats.Stats(prof))

def test_used_twice(benchmark):  # _mode is what pytest-benchmark's "used twice" error names (and not saved)
    pbcompat.record_rounds(benchmark, [0.001], "pinned mode")
    with pytest.raises(Exception, match="pinned mode"):
        benchmark(lambda: None)

def test_disabled(benchmark, request):
    if pbcompat.session_disabled(request.config):
        assert pbcompat.is_disabled(benchmark)
        pbcompat.set_mode(benchmark, "pinned disabled")  # a used fixture: no "benchmark fixture was not used"
    else:
        pbcompat.record_rounds(benchmark, [0.5], "pinned mode")

def test_compared(request):
    bs = pbcompat.benchmark_session(request.config)
    want = bool(request.config.getoption("pin_compare"))
    assert bool(bs.compared_mapping) == want
    if want:
        (runs,) = bs.compared_mapping.values()
        assert runs["test_pins.py::test_rounds"]["stats"]["rounds"] == 3
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_pins=TESTS)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("-p", "no:perfsuite", "-p", "no:randomly", "-p", "no:cacheprovider",
                                        "-W", "error::pytest_benchmark.logger.PytestBenchmarkWarning", *args)


def test_the_private_names_exist() -> None:
    assert callable(BenchmarkFixture._make_stats) and callable(BenchmarkSession.handle_loading)
    assert "_mode" in BenchmarkFixture.__init__.__code__.co_names
    stats = Stats()
    stats.update(0.25)
    assert {"median", "mean", "rounds"} <= set(stats.as_dict())
    assert "stats" in Metadata.__init__.__code__.co_names and "cprofile_stats" in Metadata.__annotations__


def test_recorded_rounds_are_saved_under_our_machine_id_and_load_as_a_comparison(inner: pytest.Pytester) -> None:
    run(inner, "--benchmark-save=pin").assert_outcomes(passed=4)
    (saved,) = (inner.path / ".benchmarks" / "pinned-class").glob("0001_pin.json")
    data = {b["name"]: b for b in json.loads(saved.read_text())["benchmarks"]}
    assert set(data) == {"test_rounds", "test_disabled"} and data["test_rounds"]["stats"]["rounds"] == 3 and data["test_rounds"]["stats"]["median"] == 0.002
    run(inner, "--pin-compare").assert_outcomes(passed=4)


def test_a_disabled_and_a_cprofile_session(inner: pytest.Pytester) -> None:
    run(inner, "--benchmark-disable", "-k", "disabled or compared").assert_outcomes(passed=2)
    run(inner, "--benchmark-cprofile=cumtime").assert_outcomes(passed=4)


def test_get_tag_names_the_commit() -> None:
    tag = pbcompat.get_tag()
    assert isinstance(tag, str) and tag
