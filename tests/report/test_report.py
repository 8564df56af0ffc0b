"""``perfsuite report``: the markdown summary, the self-contained HTML page, and the page in a real headless browser.

The browser test runs Debian's chromium (CI installs it: `apt-get install -y chromium`); it fails under CI=true
when chromium is missing, and keeps a screenshot in $PERFSUITE_TEST_ARTIFACTS (default test-artifacts/).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "history"))
from history_fixtures import REAL_CLASS, TORCH, nightly_series

from perfsuite.cli import main as cli

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parents[2]


def _ab_doc() -> dict:
    return {"kind": "ab", "runner_class": REAL_CLASS, "datetime": "2026-01-25T03:00:00+00:00",
            "a": {"tree": "../cp-a", "commit": "19" * 20}, "b": {"tree": "../cp-b", "commit": "20" * 20},
            "verdicts": [{"test": f"test_tpot[{TORCH}]", "metric": "tpot_ms", "kind": "regression", "ratio": 1.058,
                          "ci_low": 1.041, "ci_high": 1.075, "a_values": [1.84, 1.86, 1.85, 1.83, 1.88],
                          "b_values": [1.95, 1.97, 1.94, 1.99, 1.96]},
                         {"test": f"test_ttft[{TORCH}]", "metric": "ttft_ms", "kind": "unchanged", "ratio": 1.004,
                          "ci_low": 0.985, "ci_high": 1.022}]}


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    files = nightly_series(tmp, nights=24, step_at=20, step=0.06, sigma=0.012, seed=5)
    ab = tmp / "ab.json"
    ab.write_text(json.dumps(_ab_doc()))
    db = tmp / "h.sqlite"
    assert cli(["history", "ingest", "--db", str(db), *map(str, files), str(ab)]) == 0
    out = tmp / "out"
    assert cli(["report", "--db", str(db), "--out", str(out), "--title", "perfsuite nightly: cpu-intel-xeon-2c",
                "--new-within", "4", "--ops", str(DATA / "ops-matrix.json"),
                "--ops-previous", str(DATA / "ops-matrix-previous.json")]) == 0
    return out


def test_markdown_summary_names_what_needs_attention(report_dir: Path) -> None:
    md = (report_dir / "summary.md").read_text()
    assert md.startswith("# perfsuite nightly: cpu-intel-xeon-2c")
    assert "**1 new change point(s) toward slower** in the last 4 run(s)" in md
    assert "**A/B: 1 regression verdict(s)**" in md and "**2 new operator gap(s)**" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| {REAL_CLASS} `torch") and "regression" in line)
    assert "`1919191919..2020202020`" in row and "perfsuite ab --a ../cp-a --b ../cp-b --budget 5m" in row
    assert re.search(r"\*\*\+[4-8]\.\d% regression\*\* \*new\*", row), row
    assert "| `test_tpot[torch-tiny-llama-float32-b1-p64-n32]` | tpot_ms | **regression** | +5.8% | +4.1% … +7.5% |" in md
    assert "| new gap | int8_dynamic_matmul | unit | onnxruntime-cpu | float16 |" in md
    assert "absent -> pass" not in md  # cells that appear passing are no news
    latest = next(line for line in md.splitlines() if line.startswith(f"| {REAL_CLASS} | `{TORCH}`"))
    assert latest.count("%") == 2  # TTFT and TPOT change against history
    assert "(decode)" not in latest  # the run has test_e2el: its tokens/s is end to end, not test_tpot's decode rate
    assert len(md.encode()) < 100_000


def test_a_decode_only_throughput_says_so() -> None:
    from perfsuite.orchestrate.report.data import tokens_per_s

    decode = {"tokens_per_s": 529.4, "tokens_per_s_kind": "decode", "tokens_per_s_per_gib": 1200.0}
    assert tokens_per_s(decode) == "529 (decode)" and tokens_per_s(decode, "tokens_per_s_per_gib") == "1200 (decode)"
    assert tokens_per_s({"tokens_per_s": 456.2, "tokens_per_s_kind": "end to end"}) == "456"
    assert tokens_per_s({}) == "—"


def test_html_is_self_contained_with_the_plots(report_dir: Path) -> None:
    page = (report_dir / "report.html").read_text()
    assert page.count("<svg") == 9 + 1 + 1  # 9 series, A/B, ops matrix
    assert "<script" not in page
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", page), "the page must not load anything"
    assert not re.search(r"https?://", re.sub(r'xmlns(:\w+)?="[^"]*"', "", page)), "only XML namespaces may name a URL"
    data = json.loads((report_dir / "report.json").read_text())
    [cp] = [c for c in data["change_points"] if c["cell_id"] == TORCH]
    assert cp["commit_before"] == "19" * 20 and cp["kind"] == "regression" and cp["since"] == 4


def test_report_without_matplotlib_or_input_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["report", "--no-history", "--out", str(tmp_path / "o")]) == 2
    assert "nothing to report: pass --run, --ab or --ops" in capsys.readouterr().err
    assert cli(["report", "--db", str(tmp_path / "missing.sqlite"), "--out", str(tmp_path / "o")]) == 2
    assert "no history database here" in capsys.readouterr().err
    assert cli(["report", "--no-history", "--ops", str(DATA / "SOURCE.txt"), "--out", str(tmp_path / "o")]) == 2
    assert "not an ops-matrix.json" in capsys.readouterr().err


def test_a_pr_gate_report_from_an_ab_file_alone(tmp_path: Path) -> None:
    doc = _ab_doc()
    del doc["runner_class"]  # a report needs no runner class; the history would
    (tmp_path / "ab.json").write_text(json.dumps(doc))
    assert cli(["report", "--no-history", "--ab", str(tmp_path / "ab.json"), "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "summary.md").read_text()
    assert "**A/B: 1 regression verdict(s)**" in md and "History: none given." in md
    assert (tmp_path / "o" / "report.html").read_text().count("<svg") == 1


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--log-level=0"]


def _browse(page: Path, profile: Path, *extra: str) -> tuple[str, list[str]]:
    """(stdout, console messages) of chromium on a file URL."""
    exe = _chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; CI installs it with `apt-get install -y chromium`")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    proc = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


def test_the_harness_sees_console_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text('<html><head><link rel="icon" href="data:,"></head><body><script>console.error("boom");'
                   "undefined_fn();</script></body></html>")
    _, console = _browse(bad, tmp_path / "profile", "--dump-dom")
    assert any('"boom"' in c for c in console) and any("undefined_fn is not defined" in c for c in console)


def test_the_page_renders_in_headless_chromium_without_console_messages(report_dir: Path, tmp_path: Path) -> None:
    dom, console = _browse(report_dir / "report.html", tmp_path / "p1", "--dump-dom")
    assert console == []
    assert dom.count("<svg") == 11 and "perfsuite nightly: cpu-intel-xeon-2c</h1>" in dom
    artifacts = Path(os.environ.get("PERFSUITE_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "report-screenshot.png"
    shot.unlink(missing_ok=True)
    _, console = _browse(report_dir / "report.html", tmp_path / "p2", f"--screenshot={shot}",
                         "--window-size=1200,1800", "--hide-scrollbars")
    assert console == []
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000  # a blank page compresses to a few KiB
    shutil.copy(report_dir / "report.html", artifacts / "report.html")
