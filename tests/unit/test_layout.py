"""perfsuite.measure.worker.layout: a child started with the fixed-layout preexec runs without ASLR, so two of them put the
same object at the same address; without it each draws its own. Real processes, no timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.measure.worker import layout, pool

ADDR = "import sys; print(hex(id(sys)), open('/proc/self/personality').read().strip())"

needs = pytest.mark.skipif(not layout.supported(), reason=f"cannot fix the layout here: {layout.why_not()}")


def _run(fixed: bool) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", ADDR], preexec_fn=layout.preexec(fixed), capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0], int(out[1], 16)


@needs
def test_fixed_children_share_addresses_and_random_ones_do_not() -> None:
    fixed = [_run(True) for _ in range(2)]
    assert fixed[0][0] == fixed[1][0]
    assert all(p & layout.ADDR_NO_RANDOMIZE for _, p in fixed)
    if Path("/proc/sys/kernel/randomize_va_space").read_text().strip() != "0":
        drawn = [_run(False) for _ in range(3)]
        assert len({a for a, _ in drawn}) > 1  # 3 ASLR draws landing on one address: ~never
        assert not any(p & layout.ADDR_NO_RANDOMIZE for _, p in drawn)


@needs
@pytest.mark.parametrize("fixed", [True, False])
def test_a_pools_zygote_runs_with_its_sides_layout(fixed: bool, tmp_path: Path) -> None:
    """The zygote a Pool starts (and so every worker it forks) has the ASLR bit exactly when its side asks."""
    side = pool.Side(pool.this_side().tree, sys.executable, "A", (), fixed_layout=fixed)
    with pool.Pool(side, tmp_path / "w") as pl:
        pl.zygote.start()
        assert pl.zygote.proc is not None
        flags = int(Path(f"/proc/{pl.zygote.proc.pid}/personality").read_text(), 16)
    assert bool(flags & layout.ADDR_NO_RANDOMIZE) == fixed
