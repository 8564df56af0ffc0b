"""Sharding the matrix over runners: a pure, balanced, order-independent partition, and a -k that selects it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.adapters.cli.shard import cell_ids
from perfsuite.cli import main as cli
from perfsuite.orchestrate import shard

ROOT = Path(__file__).resolve().parents[2]
ids = st.lists(st.text("abcdefghijklmnop0123456789-", min_size=1, max_size=12), max_size=40)


@given(ids, st.integers(1, 8), st.randoms())
def test_shards_partition_the_cells_evenly_whatever_the_order(cells: list[str], count: int, rnd) -> None:
    parts = [shard.select(cells, i, count) for i in range(1, count + 1)]
    flat = [c for p in parts for c in p]
    assert sorted(flat) == sorted(set(cells)) and len(flat) == len(set(flat))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    shuffled = list(cells)
    rnd.shuffle(shuffled)
    assert [shard.select(shuffled, i, count) for i in range(1, count + 1)] == parts


def test_each_backend_is_spread_over_the_shards() -> None:
    cells = cell_ids("nightly", "cuda", None, None)
    for i in (1, 2, 3):
        mine = shard.select(cells, i, 3)
        assert {c.split("-")[0] for c in mine} >= {"torch", "vllm", "onnxruntime"}


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "a/b", "2"])
def test_bad_shards_are_usage_errors(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["shard", text]) == 2
    assert capsys.readouterr().err.startswith("perfsuite shard: shard ")


def test_an_empty_shard_is_an_error_not_an_empty_k(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["shard", "4/4"]) == 2  # the smoke profile has 3 cells
    assert "is empty: 3 cell(s) over 4 shards; use at most 3 shards" in capsys.readouterr().err
    with pytest.raises(shard.ShardError, match="select every test"):
        shard.k_expression([])


# Collects tests/perf once per -k in one interpreter (pytest.main, one config each): the command line of each shard,
# without paying an interpreter and its imports three times over.
COLLECT = """
import sys, pytest
for expr in sys.argv[1:]:
    print("=== shard", flush=True)
    pytest.main(["tests/perf", "--collect-only", "-q", "-k", expr, "-p", "no:cacheprovider"])
    sys.stdout.flush()
"""


def test_the_k_expression_collects_exactly_the_shard(capsys: pytest.CaptureFixture[str]) -> None:
    """pytest's -k on the bracketed ids selects the shard's tests of tests/perf and nothing else."""
    want, exprs = {}, {}
    for i in (1, 2, 3):
        want[i] = shard.select(cell_ids("smoke", "cpu", None, None), i, 3)
        assert cli(["shard", f"{i}/3"]) == 0
        exprs[i] = capsys.readouterr().out.strip()
    out = subprocess.run([sys.executable, "-c", COLLECT, *exprs.values()], cwd=ROOT, capture_output=True,
                         text=True).stdout
    parts = out.split("=== shard\n")[1:]
    assert len(parts) == 3, out[-2000:]
    for i, part in zip((1, 2, 3), parts, strict=True):
        got = {line.split("[", 1)[1].rstrip("]") for line in part.splitlines() if line.startswith("tests/perf")}
        assert got == set(want[i]), part[-2000:]
