"""``perfsuite-workers-*`` folders in the temp directory: a pool removes the one it made when it closes, unless a
failure keeps it, and then the failure names it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from perfsuite.measure.worker import pool


@pytest.fixture
def tmpdir_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_measuring_pool_leaves_no_folder(tmpdir_here: Path) -> None:
    from perfsuite.measure.ops.shapes import canonical

    with pool.Pool(pool.this_side()) as workers:  # one op cell: a job that succeeds in a forked child, in well under
        shape = canonical()["decode"][0]          # a second (the run-start peaks job took seconds of copies)
        job = {"kind": "op", "op": "rmsnorm", "backend": "torch", "dtype": "float32", "shape": shape.as_dict(),
               "seed": 0, "device": "cpu", "check_kernels": True, "index": 0, "label": "op"}
        pr = workers.measure(job, fork=True, timeout_s=300)
        assert pr.error is None and workers.workdir.parent == tmpdir_here
        assert pr.backend_info["op_result"]["status"] == "pass"
    assert not list(tmpdir_here.glob("perfsuite-workers-*"))


def test_a_failure_keeps_the_folder_and_names_it(tmpdir_here: Path) -> None:
    with pool.Pool(pool.this_side()) as workers:
        pr = workers.measure({"kind": "cell", "index": 0, "label": "x"}, fork=True, timeout_s=300)
    [kept] = tmpdir_here.glob("perfsuite-workers-*")
    assert pr.error and pr.error.endswith(f"(worker files kept in {kept})"), pr.error
    assert list(kept.glob("*.log"))


def test_a_failure_the_caller_only_notes_leaves_no_folder(tmpdir_here: Path) -> None:
    """The run-start peaks on a device this machine lacks: the error comes back whole, no folder is kept."""
    with pool.Pool(pool.this_side()) as workers:
        pr = workers.measure({"kind": "cell", "index": 0, "label": "x"}, fork=True, timeout_s=300, keep_failed=False)
    assert pr.error and "kept" not in pr.error
    assert not list(tmpdir_here.glob("perfsuite-workers-*"))


def test_a_folder_given_by_the_caller_is_never_removed(tmp_path: Path) -> None:
    given = tmp_path / "workers-a"
    with pool.Pool(pool.this_side(), given):
        pass
    assert given.is_dir()


def test_a_profile_is_read_before_the_pool_removes_its_folder(tmpdir_here: Path) -> None:
    """--benchmark-cprofile: the coordinator loads each worker's profile into memory while the folder exists, so
    the pool removes the folder on close and pytest-benchmark still gets the stats (in-process results too)."""
    import cProfile

    from perfsuite.measure.worker.job import MetricResult, ProcessResult
    from perfsuite.orchestrate import plan as harness

    with pool.Pool(pool.this_side()) as workers:
        prof = workers.workdir / "cprofile-0-tpot.prof"
        profiler = cProfile.Profile()
        profiler.runcall(sorted, [3, 1, 2])
        profiler.dump_stats(prof)
        pr = ProcessResult(0, 1, "", {"tpot": MetricResult([], {}, 0, [], {}, str(prof))}, {}, 0.0, 0.0, "")
        stats = harness._profiles(pr)
    assert not list(tmpdir_here.glob("perfsuite-workers-*"))
    assert set(stats) == {"tpot"} and any(fn[2] == "<built-in method builtins.sorted>" for fn in stats["tpot"].stats)
