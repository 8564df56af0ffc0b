"""The history database: ingest of real run files, idempotence, refusals that change nothing, migrations."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from history_fixtures import REAL_CLASS, REAL_RUN, TORCH, load_real, variant, write

from perfsuite.cli import main as cli
from perfsuite.orchestrate import history
from perfsuite.orchestrate.history import query, store


def _count(db_path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0], conn.execute(
            "SELECT count(*) FROM points").fetchone()[0]
    finally:
        conn.close()


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    p = tmp_path / "h.sqlite"
    with history.open_history(p) as db:
        history.ingest(db, [REAL_RUN])
    return p


def test_real_run_becomes_points_with_its_facts(db_path: Path) -> None:
    real = load_real()
    with history.open_history(db_path, readonly=True) as db:
        key = query.SeriesKey(REAL_CLASS, TORCH, "tpot", "median_tpot_ms")
        pts = query.points(db, key)
        want = next(b["extra_info"]["median_tpot_ms"] for b in real["benchmarks"]
                    if b["extra_info"]["cell"]["id"] == TORCH and b["extra_info"]["metric"] == "tpot")
        assert [p.value for p in pts] == [want]
        assert pts[0].commit_id == real["commit_info"]["id"]
        run = db.query("SELECT * FROM runs")[0]
        assert json.loads(run["versions"])["torch"] == "2.13.0+cpu"
        assert json.loads(run["machine"])["cores"] == 2
        assert run["profile"] == "smoke" and run["kind"] == "run"
        # one result per benchmark; the cell, samples and every vLLM-named aggregate are kept
        assert db.query("SELECT count(*) FROM results")[0][0] == len(real["benchmarks"])
        names = {r[0] for r in db.query("SELECT DISTINCT name FROM series")}
        assert {"median_ttft_ms", "p99_itl_ms", "output_throughput_tokens_per_s", "peak_rss_bytes"} <= names
        assert len(query.primary_keys(db)) == len(real["benchmarks"])


def test_the_same_run_twice_is_one_run_even_reformatted(db_path: Path, tmp_path: Path) -> None:
    before = _count(db_path)
    pretty = write(tmp_path, "pretty.json", json.dumps(load_real(), indent=4, sort_keys=True))
    with history.open_history(db_path) as db:
        rep = history.ingest(db, [REAL_RUN, pretty])
    assert rep.added == [] and len(rep.duplicates) == 2
    assert _count(db_path) == before


@pytest.mark.parametrize("content, needle", [
    ("{not json", "corrupt (not valid JSON"),
    ({"hello": "world"}, "neither a perfsuite pytest-benchmark run"),
    ({"benchmarks": [], "machine_info": {}}, "not written by perfsuite"),
    ("newer", "newer than this perfsuite"),
])
def test_a_bad_file_in_a_batch_changes_nothing(db_path: Path, tmp_path: Path, content, needle: str) -> None:
    if content == "newer":
        content = load_real()
        content["machine_info"]["perfsuite"]["schema_version"] = 99
    good = write(tmp_path, "good.json", variant(load_real(), commit="b" * 40, day=3))
    bad = write(tmp_path, "bad.json", content)
    before, digest = _count(db_path), _digest(db_path)
    with history.open_history(db_path) as db, pytest.raises(history.HistoryError, match="nothing was changed") as e:
        history.ingest(db, [good, bad])
    assert needle in str(e.value) and "bad.json" in str(e.value)
    assert "\n" not in str(e.value)
    assert _count(db_path) == before and _digest(db_path) == digest


def test_runner_class_is_asserted_and_a_pinned_database_refuses_others(tmp_path: Path) -> None:
    other = write(tmp_path, "other.json", variant(load_real(), commit="c" * 40, day=1, runner_class="rocm-gfx942-mi300x"))
    p = tmp_path / "pinned.sqlite"
    with history.open_history(p) as db:
        history.ingest(db, [REAL_RUN], runner_class="cpu-intel-xeon-2c")
        assert db.meta("runner_class") == "cpu-intel-xeon-2c"
        with pytest.raises(history.HistoryError, match="runner class 'rocm-gfx942-mi300x', but this history is for"):
            history.ingest(db, [other])  # no --runner-class: the pin still applies
    assert _count(p)[0] == 1
    # an unpinned database keeps several classes, each its own series
    q = tmp_path / "multi.sqlite"
    with history.open_history(q) as db:
        history.ingest(db, [REAL_RUN, other])
        classes = {k.runner_class for k in query.primary_keys(db)}
    assert classes == {REAL_CLASS, "rocm-gfx942-mi300x"}


def test_a_benchmark_of_another_class_inside_a_run_is_refused(tmp_path: Path) -> None:
    d = load_real()
    d["benchmarks"][0]["extra_info"]["runner_class"] = "cpu-amd-epyc-2c"
    with pytest.raises(history.HistoryError, match="a run file holds one runner class"):
        history.parse_file(write(tmp_path, "mixed.json", d))


@pytest.mark.parametrize("kind", ["garbage", "foreign", "newer", "empty-foreign-app"])
def test_unusable_databases_are_refused_untouched(tmp_path: Path, kind: str) -> None:
    p = tmp_path / "h.sqlite"
    if kind == "garbage":
        p.write_bytes(b"\x00\x01not a database at all" * 100)
        needle = "not an SQLite database"
    else:
        conn = sqlite3.connect(p)
        if kind == "foreign":
            conn.execute("CREATE TABLE users (id INTEGER)")
            needle = "not a perfsuite history"
        elif kind == "empty-foreign-app":
            conn.execute("PRAGMA application_id = 1234")
            needle = "not a perfsuite history"
        else:
            conn.execute(f"PRAGMA application_id = {store.APPLICATION_ID}")
            conn.execute("PRAGMA user_version = 99")
            conn.execute("CREATE TABLE meta (key TEXT)")
            needle = "schema 99 is newer than this perfsuite"
        conn.commit()
        conn.close()
    digest = _digest(p)
    for readonly in (False, True):
        with pytest.raises(history.HistoryError, match=needle):
            history.open_history(p, readonly=readonly)
    assert _digest(p) == digest


def test_a_corrupt_page_is_a_clear_line(db_path: Path) -> None:
    raw = bytearray(db_path.read_bytes())
    raw[100:4096 * 2] = b"\xff" * (4096 * 2 - 100)  # keep the header, wreck the schema page
    db_path.write_bytes(bytes(raw))
    with pytest.raises(history.HistoryError, match=r"corrupt SQLite file .*rebuild it with `perfsuite history"):
        with history.open_history(db_path) as db:
            query.primary_keys(db)


def test_a_lock_held_elsewhere_is_a_clear_line_and_loses_nothing(db_path: Path, tmp_path: Path) -> None:
    before = _count(db_path)
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(history.HistoryError, match="database is locked by another process"):
            with history.open_history(db_path, lock_timeout_s=0.2) as db:
                history.ingest(db, [write(tmp_path, "n.json", variant(load_real(), commit="d" * 40, day=2))])
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert _count(db_path) == before


def test_a_read_only_database_is_a_clear_line(db_path: Path, tmp_path: Path) -> None:
    # root ignores file modes, so the read-only state comes from SQLite itself (mode=ro), as on a read-only mount
    conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    db = history.History(db_path, conn, readonly=False)
    with pytest.raises(history.HistoryError, match=r"cannot write .*readonly"):
        history.ingest(db, [write(tmp_path, "n.json", variant(load_real(), commit="e" * 40, day=2))])
    conn.close()
    with history.open_history(db_path, readonly=True) as ro, pytest.raises(history.HistoryError, match="read-only"):
        history.ingest(ro, [REAL_RUN])


def test_an_older_schema_is_migrated_keeping_its_runs(tmp_path: Path) -> None:
    p = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(p, isolation_level=None)
    db = history.History(p, conn, readonly=False)
    assert store.migrate(db, 0, target=1) == [1]
    conn.execute("INSERT INTO runs (sha256, kind, runner_class, run_time, versions, machine, ingested_at) "
                 "VALUES ('x', 'run', 'cpu-x-2c', '2026-01-01T00:00:00+00:00', '{}', '{}', 'now')")
    conn.close()
    with pytest.raises(history.HistoryError, match=r"schema 1 is older .* perfsuite history migrate"):
        history.open_history(p, readonly=True)
    assert cli(["history", "migrate", "--db", str(p)]) == 0
    with history.open_history(p, readonly=True) as db:
        assert db.query("PRAGMA user_version")[0][0] == store.SCHEMA_VERSION
        assert db.query("SELECT sha256 FROM runs")[0][0] == "x"
        # the v2 table exists:
        assert db.query("SELECT count(*) FROM ab_verdicts")[0][0] == 0


def test_worker_process_values_are_kept_when_present(tmp_path: Path) -> None:
    d = variant(load_real(), commit="f" * 40, day=5)
    for b in d["benchmarks"]:
        if b["extra_info"]["cell"]["id"] == TORCH and b["extra_info"]["metric"] == "tpot":
            b["extra_info"]["processes"] = [{"samples": {"tpot_ms": [1.0, 1.2, 1.1]}},
                                            {"median_tpot_ms": 1.4, "samples": {"tpot_ms": [9.0]}}]
            b["extra_info"]["measured_by"] = {"profile": "smoke", "worker_processes": 2}
    p = tmp_path / "h.sqlite"
    with history.open_history(p) as db:
        rep = history.ingest(db, [write(tmp_path, "w.json", d)])
        key = query.SeriesKey(REAL_CLASS, TORCH, "tpot", "median_tpot_ms")
        assert query.stored_process_values(db, key, rep.added[0][1]) == [1.1, 1.4]  # its own aggregate wins
        mb = db.query("SELECT measured_by FROM results WHERE measured_by IS NOT NULL")
        assert json.loads(mb[0][0])["worker_processes"] == 2


def test_ab_results_are_stored_as_written(tmp_path: Path) -> None:
    doc = {"kind": "ab", "runner_class": "cpu-intel-xeon-2c", "datetime": "2026-02-01T03:00:00+00:00",
           "a": {"tree": "../main-tree", "commit": "1" * 40}, "b": {"tree": ".", "commit": "2" * 40},
           "verdicts": [{"test": f"test_tpot[{TORCH}]", "metric": "tpot_ms", "kind": "regression", "ratio": 1.06,
                         "a_values": [1.0, 1.01], "b_values": [1.06, 1.07]}]}
    legacy = [{"test": f"test_ttft[{TORCH}]", "metric": "ttft_ms", "kind": "unchanged", "ratio": 1.0}]
    p = tmp_path / "h.sqlite"
    with history.open_history(p) as db:
        history.ingest(db, [write(tmp_path, "ab.json", doc)])
        with pytest.raises(history.HistoryError, match="names no runner class; pass --runner-class"):
            history.ingest(db, [write(tmp_path, "legacy.json", legacy)])
        history.ingest(db, [tmp_path / "legacy.json"], runner_class="cpu-intel-xeon-2c")
        rows = query.ab_verdicts(db, last_runs=2)
    assert {(r["verdict"], r["ratio"]) for r in rows} == {("regression", 1.06), ("unchanged", 1.0)}
    ab = next(r for r in rows if r["verdict"] == "regression")
    assert ab["commit_id"] == "2" * 40 and ab["payload"]["b_values"] == [1.06, 1.07]


def test_database_path_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text('[tool.perfsuite]\nhistory = "perf/history.sqlite"\n')
    monkeypatch.delenv(history.ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert history.resolve_db(None, start=tmp_path) == tmp_path / "xdg" / "perfsuite" / "history.sqlite"
    assert history.resolve_db(None, start=proj) == proj / "perf" / "history.sqlite"
    monkeypatch.setenv(history.ENV, str(tmp_path / "env.sqlite"))
    assert history.resolve_db(None, start=proj) == tmp_path / "env.sqlite"
    assert history.resolve_db(str(tmp_path / "cli.sqlite"), start=proj) == tmp_path / "cli.sqlite"
    with pytest.raises(history.HistoryError, match="an SQLite file, not a server URL"):
        history.resolve_db("postgresql://perf@db/perf")


def test_cli_ingest_show_export_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "h.sqlite")
    assert cli(["history", "ingest", "--db", db, str(REAL_RUN), str(REAL_RUN)]) == 0
    out = capsys.readouterr().out
    assert "1 added, 1 already there, 1 runs in all" in out
    assert cli(["history", "show", "--db", db]) == 0
    assert TORCH in capsys.readouterr().out
    csv_out = tmp_path / "h.csv"
    assert cli(["history", "export", "--db", db, "--out", str(csv_out)]) == 0
    assert "points to" in capsys.readouterr().err
    lines = csv_out.read_text().splitlines()
    assert lines[0].startswith("runner_class,cell_id,metric,name,process,value") and len(lines) > 50
    bad = write(tmp_path, "bad.json", "{")
    assert cli(["history", "ingest", "--db", db, str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfsuite history: ") and "bad.json: corrupt" in err and "\n" not in err
    assert cli(["history", "show", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert "no history database here" in capsys.readouterr().err
    # six points are needed for a change point; one is there
    assert cli(["history", "changepoints", "--db", db]) == 0
    assert "too short for detection: 1 point(s); change-point detection needs at least 6" in capsys.readouterr().out


def test_ingest_names_the_nonfinite_values_it_drops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = load_real()
    info = data["benchmarks"][0]["extra_info"]
    info["median_ttft_ms"] = float("nan")
    info["samples"]["ttft_ms"][:2] = [float("inf"), float("-inf")]
    info["processes"] = [{"samples": {"ttft_ms": [1.0, float("nan"), 2.0]}}]
    bad = write(tmp_path, "nan.json", data)
    assert cli(["history", "ingest", "--db", str(tmp_path / "h.sqlite"), str(bad)]) == 0
    err = capsys.readouterr().err
    assert (f"perfsuite history: {bad}: dropped 4 non-finite value(s) (NaN/inf): median_ttft_ms 1, "
            "samples.ttft_ms 2, processes[].samples.ttft_ms 1") in err, err


def test_an_old_style_run_joins_the_series_of_its_class_today(tmp_path: Path) -> None:
    """A run recorded as cpu-intel-xeon-2c (before the CPU tier) and one recorded as cpu-intel-xeon-amx-2c are one
    series, as the gate reads them; the recorded name is kept in the run's facts."""
    new = load_real()
    ps = new["machine_info"]["perfsuite"]
    ps.update(runner_class=REAL_CLASS, detected_runner_class=REAL_CLASS, cpu_tier="amx")
    for b in new["benchmarks"]:
        b["extra_info"]["runner_class"] = REAL_CLASS
    newer = write(tmp_path, "new.json", variant(new, commit="d" * 40, day=40))
    with history.open_history(tmp_path / "h.sqlite") as db:
        history.ingest(db, [REAL_RUN, newer])
        assert {k.runner_class for k in query.primary_keys(db)} == {REAL_CLASS}
        assert len(query.points(db, query.SeriesKey(REAL_CLASS, TORCH, "tpot", "median_tpot_ms"))) == 2
        old = json.loads(db.query("SELECT machine FROM runs WHERE source = ?", (str(REAL_RUN),))[0][0])
        assert old["runner_class_recorded"] == "cpu-intel-xeon-2c" and old["runner_class"] == REAL_CLASS


def test_an_explicit_class_stays_as_given(tmp_path: Path) -> None:
    """A run recorded under an override (not the class detected then) is not renamed; nor is a run ingested into a
    history asked for by its recorded name (--runner-class cpu-intel-xeon-2c, a database pinned to it)."""
    forced = load_real()
    forced["machine_info"]["perfsuite"]["detected_runner_class"] = "cpu-other-2c"
    assert history.parse_file(write(tmp_path, "forced.json", forced)).runner_class == "cpu-intel-xeon-2c"
    assert history.parse_file(REAL_RUN).runner_class == REAL_CLASS
    assert history.parse_file(REAL_RUN, "cpu-intel-xeon-2c").runner_class == "cpu-intel-xeon-2c"


def test_runs_and_export_keep_to_the_runner_class_asked_for(tmp_path: Path) -> None:
    forced = load_real()
    forced["machine_info"]["perfsuite"]["detected_runner_class"] = "cpu-other-2c"  # stays cpu-intel-xeon-2c
    other = write(tmp_path, "other.json", variant(forced, commit="e" * 40, day=41))
    with history.open_history(tmp_path / "h.sqlite") as db:
        history.ingest(db, [REAL_RUN, other])
        assert len(query.runs(db)) == 2
        for rc in (REAL_CLASS, "cpu-intel-xeon-2c"):
            assert [r["runner_class"] for r in query.runs(db, runner_class=rc)] == [rc]
            rows = query.export_rows(db, runner_class=rc)
            assert rows and {r["runner_class"] for r in rows} == {rc}
        assert len(query.export_rows(db)) == sum(len(query.export_rows(db, runner_class=rc))
                                                 for rc in (REAL_CLASS, "cpu-intel-xeon-2c"))


def test_cli_show_prints_the_median_of_an_even_number_of_runs(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of the torch cell's TPOT, 1.0 and 3.0 ms: the median column says 2, not the upper middle value."""
    real = load_real()
    runs = [write(tmp_path, f"r{i}.json", variant(real, commit=f"{i}" * 40, day=i, tpot_ms=ms))
            for i, ms in enumerate((1.0, 3.0))]
    db = str(tmp_path / "h.sqlite")
    assert cli(["history", "ingest", "--db", db, *map(str, runs)]) == 0
    capsys.readouterr()
    assert cli(["history", "show", "--db", db, "--cell", TORCH]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "median_tpot_ms" in line)
    assert row.split()[-3:] == ["2", "3", "2"]  # points, last, median
