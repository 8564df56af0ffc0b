"""The thread count an A/B gives both sides beside a co-tenant (perfsuite.cotenant), from injected load samples."""

from __future__ import annotations

import pytest

from perfsuite import cotenant
from perfsuite.confirm import decision
from perfsuite.preflight import LoadSample, OtherProcess


def sample(other: float, cpus: int = 2) -> LoadSample:
    top = (OtherProcess(4242, "python3", other),) if other else ()
    return LoadSample(True, 0.5, cpus, busy_cores=other, own_cores=0.0, other_cores=other, top=top)


QUIET = {"A": {}, "B": {}}


def test_a_quiet_machine_keeps_every_cells_default() -> None:
    c = cotenant.decide(sample(0.1), QUIET, cpus=2)
    assert c.threads is None and c.env == ()
    assert "cell's own default" in c.line


def test_a_busy_loop_on_two_cores_leaves_one_thread_to_both_sides() -> None:
    c = cotenant.decide(sample(1.0), QUIET, cpus=2)
    assert c.threads == 1 and c.env == (("OMP_NUM_THREADS", "1"),)
    assert "co-tenant holds 1.00 of 2 cores" in c.line and "pid 4242 python3" in c.line
    assert c.as_dict()["other_cores"] == 1.0


@pytest.mark.parametrize(("other", "cpus", "threads"), [(0.3, 2, 1), (1.9, 2, 1), (3.0, 2, 1), (1.0, 8, 7),
                                                       (2.6, 8, 5), (0.3, 8, 7)])
def test_threads_leave_the_busy_cores(other: float, cpus: int, threads: int) -> None:
    assert cotenant.decide(sample(other, cpus), QUIET, cpus=cpus).threads == threads


def test_a_side_that_fixes_its_threads_is_left_alone() -> None:
    c = cotenant.decide(sample(1.0), {"A": {"OMP_NUM_THREADS": "2"}, "B": {}}, cpus=2)
    assert c.threads is None and "set for side(s) A" in c.line


def test_this_process_environment_counts_as_fixing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(cotenant, "sample_load", lambda interval_s: sample(1.0))
    assert cotenant.choose(QUIET).threads is None


def test_choose_samples_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cotenant, "sample_load", lambda interval_s: sample(1.0))
    monkeypatch.setattr(cotenant, "usable_cpus", lambda: 2)
    assert cotenant.choose(QUIET).threads == 1
    assert cotenant.choose(QUIET, "cell").threads is None  # no sample taken, the cells' default


def test_cell_mode_and_no_sample_keep_the_default() -> None:
    assert cotenant.decide(sample(1.0), QUIET, cpus=2, mode="cell").threads is None
    c = cotenant.decide(LoadSample(False, reason="no /proc/stat (not Linux)"), QUIET, cpus=2)
    assert c.threads is None and "not Linux" in c.line
    with pytest.raises(ValueError, match=r"'fewer'.*auto, cell"):
        cotenant.decide(sample(1.0), QUIET, cpus=2, mode="fewer")


def test_the_drift_line_says_the_thread_count_changed() -> None:
    f = decision.Finding("refuted", "median_tpot_ms", drift=0.4, a_value=1.4, baseline_value=1.0, threads=1)
    text = decision.drift_text(f)
    assert "40.0% slower" in text and "OMP_NUM_THREADS=1 beside a co-tenant" in text
    assert "OMP_NUM_THREADS" not in decision.drift_text(decision.Finding("refuted", "m", drift=0.4))
