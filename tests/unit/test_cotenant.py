"""The thread count an A/B gives both sides beside a co-tenant (perfsuite.machine.cotenant), from injected load samples."""

from __future__ import annotations

import pytest

from perfsuite.machine import cotenant
from perfsuite.machine.preflight import LoadSample, OtherProcess
from perfsuite.verdict import confirm_decision as decision


def sample(other: float, cpus: int = 2) -> LoadSample:
    top = (OtherProcess(4242, "python3", other),) if other else ()
    return LoadSample(True, 0.5, cpus, busy_cores=other, own_cores=0.0, other_cores=other, top=top)


QUIET = {"A": {}, "B": {}}


def test_a_quiet_machine_keeps_every_cells_default() -> None:
    c = cotenant.decide(sample(0.1, 8), QUIET, cpus=8)
    assert c.threads is None and c.env == ()
    assert "cell's own default" in c.line


@pytest.mark.parametrize("cpus", [1, 2])
def test_a_quiet_small_machine_gives_each_side_one_thread(cpus: int) -> None:
    c = cotenant.decide(sample(0.1, cpus), QUIET, cpus=cpus)
    assert c.threads == 1 and c.env == (("OMP_NUM_THREADS", "1"),)
    assert f"{cpus}-core machine" in c.line and "0.10 of" in c.line and "spin" in c.line
    c = cotenant.decide(LoadSample(False, reason="no /proc/stat (not Linux)"), QUIET, cpus=cpus)
    assert c.threads == 1 and "not Linux" in c.line  # the rule needs no load sample
    assert cotenant.decide(sample(0.1, 3), QUIET, cpus=3).threads is None  # above SMALL_CPUS: not measured


def test_a_thread_count_mode_fixes_both_sides() -> None:
    c = cotenant.decide(sample(0.0, 8), QUIET, cpus=8, mode="3")
    assert c.threads == 3 and "thread mode '3'" in c.line
    assert cotenant.decide(sample(0.0, 8), {"A": {"OMP_NUM_THREADS": "2"}, "B": {}}, cpus=8, mode="3").threads is None
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ValueError, match="a thread count such as 1"):
            cotenant.parse_mode(bad)


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
    c = cotenant.decide(LoadSample(False, reason="no /proc/stat (not Linux)"), QUIET, cpus=8)
    assert c.threads is None and "not Linux" in c.line
    with pytest.raises(ValueError, match=r"'fewer'.*auto, cell"):
        cotenant.decide(sample(1.0), QUIET, cpus=2, mode="fewer")


def test_the_drift_line_says_the_thread_count_changed() -> None:
    f = decision.Finding("refuted", "median_tpot_ms", drift=0.4, a_value=1.4, baseline_value=1.0, threads=1)
    text = decision.drift_text(f)
    assert "40.0% slower" in text and "OMP_NUM_THREADS=1" in text and "screen of B over the A/B's B/A" in text
    assert "1.4 vs 1" not in text  # A's own level was taken at one thread: not shown as the machine's
    assert "OMP_NUM_THREADS" not in decision.drift_text(decision.Finding("refuted", "m", drift=0.4))


def test_drift_at_other_threads_comes_from_the_screen_over_the_ab() -> None:
    """A at one thread is slower than the baseline recorded at two for reasons of its own; what the machine's level
    is at the cell's threads is this session's screen of B (1.32 against 1.0) over the A/B's B/A (1.1): +20 %."""
    from types import SimpleNamespace

    from perfsuite.orchestrate.confirm.session import Target, finding
    from perfsuite.verdict import sequential

    cs = sequential.ConfidenceSequence(alpha=0.05)
    for d in (0.0953,) * 8:
        cs.update(d)
    m = SimpleNamespace(cs=cs, kind="refuted", a_values=[1.9, 2.0, 2.1], early=None)
    t = Target("n", "c", "tpot", "median_tpot_ms", "regression", baseline_value=1.0, screen_value=1.32)
    f = finding(t, m, "abc1234", 100.0, 0.8, threads=1)
    assert f.change == pytest.approx(0.1, abs=1e-3) and f.drift == pytest.approx(1.32 / 1.1 - 1, abs=1e-3)
    f0 = finding(t, m, "abc1234", 100.0, 0.8, threads=None)
    assert f0.drift == pytest.approx(2.0 - 1, abs=1e-2)  # at the cell's threads A's own level is the drift


def test_both_sides_get_one_hash_seed_unless_one_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    env = cotenant.hash_seed_env(QUIET, random.Random(1))
    assert [k for k, _ in env] == ["PYTHONHASHSEED"] and 1 <= int(dict(env)["PYTHONHASHSEED"]) < 2**32
    assert env == cotenant.hash_seed_env(QUIET, random.Random(1))  # seeded: a rerun of ab --seed gets the same
    assert env != cotenant.hash_seed_env(QUIET, random.Random(2))  # drawn per run
    assert cotenant.hash_seed_env({"A": {"PYTHONHASHSEED": "7"}, "B": {}}, random.Random(1)) == ()
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert cotenant.hash_seed_env(QUIET, random.Random(1)) == ()  # the caller's own choice is left alone
