"""E-divisive means: the statistic, the error control of its permutation test and its detection delay.

The null tests count false change points on iid series (normal, heavy-tailed t(2), lognormal, bimodal: the shapes
of per-run noise seen on this VM, see issue 10) and check them against the level with a binomial bound; the
nightly test replays a growing history night by night, as the nightly workflow does, and counts distinct alarms.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from history_fixtures import REAL_CLASS, TORCH, nightly_series
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from perfsuite.cli import main as cli
from perfsuite.orchestrate import history
from perfsuite.orchestrate.history import query
from perfsuite.verdict import changepoint as cpd


def _brute_best(z: np.ndarray, min_size: int) -> tuple[int, float]:
    best = (-1, -math.inf)
    n = z.size
    for t in range(min_size, n - min_size + 1):
        x, y = z[:t], z[t:]
        m, k = x.size, y.size
        xy = np.abs(x[:, None] - y[None, :]).mean()
        xx = np.abs(x[:, None] - x[None, :]).sum() / (m * (m - 1))
        yy = np.abs(y[:, None] - y[None, :]).sum() / (k * (k - 1))
        q = m * k / (m + k) * (2 * xy - xx - yy)
        if q > best[1] + 1e-12:
            best = (t, q)
    return best


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-100, 100, allow_nan=False), min_size=4, max_size=25), st.integers(2, 4))
def test_best_split_matches_the_definition(values: list[float], min_size: int) -> None:
    z = np.asarray(values)
    tau, q = cpd._best_split(z, min_size, 1.0)
    bt, bq = _brute_best(z, min_size)
    if z.size < 2 * min_size:
        assert tau == -1
    else:
        assert q == pytest.approx(bq, rel=1e-9, abs=1e-9)


def _upper(k: int, n: int, level: float = 0.001) -> bool:
    """True if k false alarms in n trials are consistent with a rate <= the nominal one (one-sided binomial)."""
    return True if k == 0 else stats.binom.sf(k - 1, n, NOMINAL) > level


NOMINAL = 0.05
NOISE = {
    "normal": lambda r, n: r.normal(0, 0.03, n),
    "t2 (heavy tails)": lambda r, n: 0.02 * r.standard_t(2, n),
    "lognormal": lambda r, n: r.lognormal(0, 1.0, n),
    "bimodal (a slow process now and then)": lambda r, n: np.where(r.random(n) < 0.2, 0.13, 0.0) + r.normal(0, 0.02, n),
}


@pytest.mark.parametrize("shape", list(NOISE))
def test_false_alarm_rate_on_iid_noise_is_at_most_the_level(shape: str) -> None:
    rng = np.random.default_rng(sum(map(ord, shape)))
    trials = 300
    alarms = sum(bool(cpd.e_divisive(np.exp(NOISE[shape](rng, 30)), max_pvalue=NOMINAL, permutations=99))
                 for _ in range(trials))
    assert _upper(alarms, trials), f"{alarms}/{trials} false change points at level {NOMINAL}"


def test_nightly_replay_of_iid_history_raises_at_most_one_alarm_per_100_nights() -> None:
    """The nightly loop: each night the series grows by one point and the whole window is re-tested."""
    rng = np.random.default_rng(7)
    alarms, nights = 0, 0
    for _ in range(6):
        x = np.exp(rng.normal(0, 0.03, 100) + 0.02 * rng.standard_t(3, 100))
        seen: list[int] = []
        for n in range(cpd.needed_points(), x.size + 1):
            nights += 1
            for c in cpd.e_divisive(x[:n]):
                if all(abs(c.index - s) > 3 for s in seen):
                    seen.append(c.index)
        alarms += len(seen)
    assert alarms / nights * 100 <= 1.0, f"{alarms} distinct false change points in {nights} nightlies"


@pytest.mark.parametrize("sigma, within", [(0.01, 3), (0.015, 4)])
def test_a_5_percent_step_is_flagged_within_a_few_nightlies(sigma: float, within: int) -> None:
    """30 quiet nights, then +5 %: nights until a change point lands at the step (+-1), over 40 histories."""
    rng = np.random.default_rng(int(sigma * 1e4))
    delays = []
    for _ in range(40):
        pre, post = rng.normal(0, sigma, 30), rng.normal(math.log(1.05), sigma, 8)
        delay = None
        for k in range(1, post.size + 1):
            cps = cpd.e_divisive(np.exp(np.concatenate([pre, post[:k]])))
            if any(abs(c.index - 30) <= 1 and c.change > 0.02 for c in cps):
                delay = k
                break
        delays.append(delay if delay is not None else 99)
    hit = np.mean([d <= within for d in delays])
    assert hit >= 0.8, f"flagged within {within} nightlies in {hit:.0%} (delays {sorted(delays)})"


def test_two_steps_are_both_found_with_their_sizes() -> None:
    rng = np.random.default_rng(3)
    x = np.exp(np.concatenate([rng.normal(0, 0.01, 20), rng.normal(0.1, 0.01, 20), rng.normal(0.03, 0.01, 20)]))
    cps = cpd.e_divisive(x)
    assert [c.index for c in cps] == [20, 40]
    assert cps[0].change == pytest.approx(math.exp(0.1) - 1, abs=0.01)
    assert cps[1].ratio == pytest.approx(math.exp(-0.07), abs=0.01)
    assert all(c.p_value <= cpd.DEFAULT_MAX_PVALUE for c in cps)
    assert cpd.e_divisive(x) == cps  # the same history always gives the same answer


def test_constant_and_short_series() -> None:
    assert cpd.e_divisive([2.0] * 12) == []
    with pytest.raises(cpd.SeriesTooShort, match=r"5 point.*needs at least 6"):
        cpd.e_divisive([1.0] * 5)
    with pytest.raises(cpd.SeriesTooShort, match="needs at least 8"):
        cpd.e_divisive([1.0] * 7, min_size=4)
    with pytest.raises(ValueError, match="finite"):
        cpd.e_divisive([1.0] * 5 + [math.nan] * 3)


def test_history_names_the_commits_and_the_ab_that_confirms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs built from a real run file: 12 nights at the measured TPOT, then 4 nights 6 % slower."""
    files = nightly_series(tmp_path, nights=16, step_at=12, step=0.06, sigma=0.01, seed=11, base_ms=2.0)
    db = tmp_path / "h.sqlite"
    assert cli(["history", "ingest", "--db", str(db), *map(str, files)]) == 0
    capsys.readouterr()
    out_json = tmp_path / "cps.json"
    rc = cli(["history", "changepoints", "--db", str(db), "--metric", "tpot", "--cell", TORCH, "--new-within", "4",
              "--fail-on-regression", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert re.search(rf"REGRESSION: {REAL_CLASS} {TORCH} tpot:median_tpot_ms: \+[4-8]\.\d%", out), out
    assert "between 1111111111..1212121212" in out
    assert (f"confirm: perfsuite ab --a ../cp-a --b ../cp-b --budget 5m --cells {TORCH} --profile smoke "
            "--device cpu --backend torch --model tiny-llama") in out
    assert f"git worktree add ../cp-a {'11' * 20} && git worktree add ../cp-b {'12' * 20}" in out
    with history.open_history(db, readonly=True) as h:
        [f] = query.find_changes(h, query.SeriesKey(REAL_CLASS, TORCH, "tpot", "median_tpot_ms"))
    assert f.since == 4 and f.kind == "regression"
    import json

    assert json.loads(out_json.read_text())["findings"][0]["commit_after"] == "12" * 20
    # the same history, asked only for changes of the last 2 nights: nothing new
    assert cli(["history", "changepoints", "--db", str(db), "--new-within", "2", "--fail-on-regression"]) == 0
