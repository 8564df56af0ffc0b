"""Every use of pytest-benchmark's private names, in one module.

pytest-benchmark has no public API for rounds timed elsewhere, for its session object or for its run tag; perfsuite
needs all three. Everything else in perfsuite calls these small functions, and tests/unit/test_pbcompat.py pins each
internal they rely on against the installed pytest-benchmark, so an upgrade that changes one fails there first.
Imports nothing of pytest-benchmark at module level (pytest loads it as a plugin).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest


def benchmark_session(config: pytest.Config) -> Any | None:
    """pytest-benchmark's ``BenchmarkSession`` (``config._benchmarksession``), or None before its configure or
    without the plugin."""
    return getattr(config, "_benchmarksession", None)


def session_disabled(config: pytest.Config) -> bool:
    """Whether pytest-benchmark is disabled for this run (``--benchmark-disable``, xdist, ...)."""
    bs = benchmark_session(config)
    return bool(bs is not None and bs.disabled)


def session_cprofile(config: pytest.Config) -> bool:
    """Whether ``--benchmark-cprofile`` was given."""
    bs = benchmark_session(config)
    return bool(bs is not None and bs.options.get("cprofile"))


def load_comparison(config: pytest.Config, machine_id: str, compare: Any) -> bool:
    """Give pytest-benchmark's session our machine id (its storage keys runs by it), then have it load the
    comparison ``compare`` (its ``--benchmark-compare`` value). False when there is no such session."""
    bs = benchmark_session(config)
    if bs is None:
        return False
    bs.machine_id = machine_id
    bs.storage.default_machine_id = machine_id
    config.option.benchmark_compare = compare
    bs.compare = compare
    bs.handle_loading()
    return True


def set_mode(benchmark: Any, text: str) -> None:
    """The mode pytest-benchmark names in its "fixture used twice" error and checks to see the fixture was used."""
    benchmark._mode = text


def record_rounds(benchmark: Any, rounds_s: Sequence[float], mode: str) -> None:
    """Put rounds (seconds, one iteration each) timed elsewhere into a pytest-benchmark fixture."""
    set_mode(benchmark, mode)
    stats = benchmark._make_stats(1)
    for d in rounds_s:
        stats.update(float(d))


def is_disabled(benchmark: Any) -> bool:
    """Whether this fixture is disabled (pytest-benchmark runs the test but times nothing)."""
    return bool(getattr(benchmark, "disabled", False))


def wants_cprofile(benchmark: Any) -> bool:
    return bool(getattr(benchmark, "cprofile", False))


def set_cprofile_stats(benchmark: Any, stats: Any) -> None:
    """Attach a ``pstats.Stats`` to the recorded statistics (after :func:`record_rounds`)."""
    benchmark.stats.cprofile_stats = stats


def stats_dict(benchmark: Any) -> dict[str, Any]:
    """The recorded statistics as a dict (median, mean, rounds, ...; after :func:`record_rounds`)."""
    return dict(benchmark.stats.stats.as_dict())


def get_tag() -> str:
    """pytest-benchmark's run tag (commit id, time, ``uncommitted-changes``), the tail of a saved run's name."""
    from pytest_benchmark.utils import get_tag as tag

    return str(tag())
