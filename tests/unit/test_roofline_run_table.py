"""`perfsuite run`'s table: the roofline columns, and why a Δ column shows "—" with the command that fixes it."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

from perfsuite.adapters.cli import run
from perfsuite.machine.roofline import annotate as rl

RESULTS = json.loads((Path(__file__).parent / "data" / "run_tiny_llama_torch_quiet_20261130.json").read_text())


def _args(**kw: object) -> argparse.Namespace:
    base = {"profile": None, "backend": None, "model": None, "device": "cpu", "runner_class": None,
            "update_baselines": False}
    return argparse.Namespace(**{**base, **kw})


def _with_roofline() -> dict:
    data = copy.deepcopy(RESULTS)
    rows = {r["test"]: r for r in rl.annotate_results(data, 13e9, 120e9)}
    for b in data["benchmarks"]:
        b["extra_info"].update({k: v for k, v in rows[b["name"]].items() if k not in ("test", "cell", "metric")})
    return data


def test_roofline_columns_come_from_extra_info() -> None:
    head, _, row = run.table(_with_roofline(), None)
    assert "BW GB/s" in head and "BW %" in head
    tpot = next(b for b in _with_roofline()["benchmarks"] if b["extra_info"]["metric"] == "tpot")["extra_info"]
    assert f"{tpot['achieved_bandwidth_bytes_per_s'] / 1e9:.1f}" in row
    assert f"{tpot['bandwidth_efficiency_measured']:.0%}" in row


def _bw_pct(data: dict) -> str:
    _, _, row = run.table(data, None)
    return row.split()[-3]  # BW %, ΔTTFT, ΔTPOT


def test_bw_percent_is_never_above_100_and_cache_resident_cells_say_so() -> None:
    """The reported defect: onnxruntime-cpu's tiny-llama at 108 % of DRAM bandwidth (its 14 MB fit the 32 MiB L3)."""
    data = copy.deepcopy(RESULTS)
    for llc, cache, want in ((32 * 2**20, None, "cache"), (32 * 2**20, 300e9, None), (8 * 2**20, None, "> peak")):
        rows = {r["test"]: r for r in rl.annotate_results(data, 5e9, 120e9, llc_bytes=llc,
                                                          cache_bandwidth_bytes_per_s=cache)}
        d = copy.deepcopy(data)
        for b in d["benchmarks"]:
            b["extra_info"].update({k: v for k, v in rows[b["name"]].items() if k not in ("test", "cell", "metric")})
        pct = " ".join(_bw_pct(d).split())
        if want is None:  # against the LLC copy: a share, marked c
            assert pct.endswith("%c") and 0 <= int(pct[:-2]) <= 100
        else:
            assert pct == want or (want == "> peak" and run.table(d, None)[2].count("> peak") == 1)
        notes = run.roofline_notes(d)
        if llc == 32 * 2**20:
            assert notes and "fits the 32 MiB LLC" in notes[0]
        else:
            assert any("> peak for torch-tiny-llama-float32-b1-p64-n32" in n and "no share is given" in n for n in notes)
    assert run.roofline_notes(RESULTS) == []


def test_without_roofline_keys_the_columns_say_dash() -> None:
    _, _, row = run.table(RESULTS, None)
    assert row.split()[-4:] == ["—", "—", "—", "—"]  # BW GB/s, BW %, ΔTTFT, ΔTPOT


def test_tpot_columns_print_tpot_and_itl_only_under_its_own_name() -> None:
    """The columns labelled TPOT print vLLM's TPOT (median/p99_tpot_ms); a run that recorded only the per-token
    gaps gets them under the label ITL, never under TPOT."""
    head, _, row = run.table(RESULTS, None)
    tpot = next(b for b in RESULTS["benchmarks"] if b["extra_info"]["metric"] == "tpot")["extra_info"]
    assert tpot["median_tpot_ms"] != tpot["median_itl_ms"]  # the fixture tells them apart
    cols = head.split()
    assert cols[2:11] == ["TTFT", "p50", "ms", "TPOT", "p50", "ms", "TPOT", "p99", "ms"]
    assert row.split()[3:5] == [f"{tpot['median_tpot_ms']:.3f}", f"{tpot['p99_tpot_ms']:.3f}"]
    only_itl = copy.deepcopy(RESULTS)
    for b in only_itl["benchmarks"]:
        for k in ("mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms"):
            b["extra_info"].pop(k, None)
    head, _, row = run.table(only_itl, None)
    assert head.split()[5:11] == ["ITL", "p50", "ms", "ITL", "p99", "ms"] and "TPOT p" not in head
    assert row.split()[3:5] == [f"{tpot['median_itl_ms']:.3f}", f"{tpot['p99_itl_ms']:.3f}"]


def test_no_baseline_footnote_names_the_command(tmp_path: Path) -> None:
    lines = run.footnotes(RESULTS, None, "cpu-intel-xeon-amx-2c", tmp_path / "baselines" / "cpu-intel-xeon-amx-2c",
                          _args(backend="torch", profile="pr"))
    assert "no baseline for runner class 'cpu-intel-xeon-amx-2c'" in lines[0]
    assert lines[1].strip() == "perfsuite run --update-baselines --profile pr --backend torch"


def test_gpu_device_without_runner_class_footnote(tmp_path: Path) -> None:
    lines = run.footnotes(RESULTS, None, None, tmp_path, _args(device="cuda"))
    assert "pass --runner-class" in lines[0] and lines[1].strip() == "perfsuite run --update-baselines --device cuda"


def test_recording_run_footnote(tmp_path: Path) -> None:
    [line] = run.footnotes(RESULTS, None, "rc", tmp_path, _args(update_baselines=True))
    assert "being recorded as the baseline" in line


def test_cells_missing_from_the_baseline_are_named(tmp_path: Path) -> None:
    base = copy.deepcopy(RESULTS)
    base["benchmarks"] = [b for b in base["benchmarks"] if b["extra_info"]["metric"] != "ttft"]
    for b in base["benchmarks"]:
        b["extra_info"]["cell"]["id"] = "torch-tiny-opt-float32-b1-p64-n32"
    [line] = run.footnotes(RESULTS, base, "rc", tmp_path, _args())
    assert "1 cell(s) the latest baseline does not have (torch-tiny-llama-float32-b1-p64-n32)" in line
    assert run.footnotes(RESULTS, RESULTS, "rc", tmp_path, _args()) == []


def test_no_baseline_but_an_old_style_folder_names_the_migration(tmp_path: Path) -> None:
    old = tmp_path / "baselines" / "cpu-intel-xeon-2c"
    lines = run.footnotes(RESULTS, None, "cpu-intel-xeon-amx-2c", tmp_path / "baselines" / "cpu-intel-xeon-amx-2c",
                          _args(backend="torch", profile="pr"), legacy=old)
    assert len(lines) == 1 and f"{old} holds this machine's baselines under its old runner class name" in lines[0]
    assert "perfsuite baselines migrate" in lines[0] and "--update-baselines" not in lines[0]
