import json
import os
import stat

import pytest

from perfsuite.orchestrate import baselines


def run(rc="cpu-x-2c", schema=baselines.SCHEMA_VERSION):
    return {"machine_info": {"perfsuite": {"schema_version": schema, "runner_class": rc}},
            "benchmarks": [{"fullname": "t::test_tpot[c]", "name": "test_tpot[c]", "stats": {"median": 1.0}}]}


def test_write_is_numbered_and_never_overwrites(tmp_path):
    a = baselines.write_run(tmp_path, run(), "smoke_abc")
    b = baselines.write_run(tmp_path, run(), "smoke abc/../x")
    assert [p.name for p in baselines.list_runs(tmp_path)] == [a.name, b.name]
    assert a.name.startswith("0001_") and b.name.startswith("0002_")
    assert "/" not in b.name[5:] and not list(tmp_path.glob(".incoming-*"))
    assert baselines.read_run(a, "cpu-x-2c")["benchmarks"][0]["stats"]["median"] == 1.0


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(baselines.os, "link", boom)
    with pytest.raises(OSError):
        baselines.write_run(tmp_path, run(), "x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "corrupt baseline (not valid JSON"),
        (json.dumps({"x": 1}), "not a pytest-benchmark result"),
        (json.dumps({"benchmarks": [], "machine_info": {}}), "not written by perfsuite"),
        (json.dumps(run(schema=99)), "schema_version 99 is newer than this perfsuite (1); upgrade perfsuite"),
        (json.dumps(run(rc="rocm-gfx90a-mi250x")), "recorded on runner class 'rocm-gfx90a-mi250x', this machine"),
        (json.dumps({**run(), "benchmarks": [{"name": "x"}]}), "lacks 'fullname' or 'stats'"),
    ],
)
def test_bad_baselines_are_rejected_with_the_fix(tmp_path, content, needle):
    p = tmp_path / "0001_x.json"
    p.write_text(content)
    with pytest.raises(baselines.BaselineError) as exc:
        baselines.read_run(p, "cpu-x-2c")
    assert needle in str(exc.value) and str(p) in str(exc.value)


def test_read_runs_takes_the_latest(tmp_path):
    for _ in range(3):
        baselines.write_run(tmp_path, run(), "r")
    assert len(baselines.read_runs(tmp_path, "cpu-x-2c", last=2)) == 2


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_recorded_baselines_get_the_mode_of_a_normal_file(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        p = baselines.write_run(tmp_path, run(), "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == mode


def test_a_current_run_is_not_called_a_baseline(tmp_path):
    p = tmp_path / "current.json"
    p.write_text("{not json")
    with pytest.raises(baselines.BaselineError) as exc:
        baselines.read_run(p, role="current")
    assert "corrupt current run" in str(exc.value) and "baseline" not in str(exc.value)
    assert "re-run the benchmarks" in str(exc.value)
    with pytest.raises(baselines.BaselineError, match="no such current run file"):
        baselines.read_run(tmp_path / "missing.json", role="current")
    with pytest.raises(baselines.BaselineError, match="corrupt baseline"):  # the default is unchanged
        baselines.read_run(p)
    with pytest.raises(ValueError, match="role 'other'"):
        baselines.read_run(p, role="other")


@pytest.mark.parametrize("rc", ["../../etc", "/etc", "known_gaps", ".."])
def test_class_folder_never_leaves_the_baselines_folder(tmp_path, rc):
    root = tmp_path / "baselines"
    with pytest.raises(baselines.BaselineError):
        baselines.class_dir(root, rc)
    with pytest.raises(baselines.BaselineError):
        baselines.write_run(root / rc, run(), "x", baselines_dir=root)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == []


def test_symlinked_class_folder_pointing_outside_is_refused(tmp_path):
    root = tmp_path / "baselines"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "cpu-x-2c").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(baselines.BaselineError, match="outside"):
        baselines.write_run(root / "cpu-x-2c", run(), "x", baselines_dir=root)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    good = baselines.write_run(root / "cpu-y-2c", run(), "x", baselines_dir=root)
    assert good.parent == baselines.class_dir(root, "cpu-y-2c")
