import json

import pytest

from perfsuite import baselines


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
