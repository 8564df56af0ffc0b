"""``perfsuite roofline RESULTS.json``: the roofline of each cell of a results file, after the fact.

For each decode (test_tpot, test_e2el) the bytes a step moves (weights + KV cache) over the measured step time, as a
share of the memory bandwidth; for each prefill the FLOP/s achieved, as a share of the matmul peak. Without
--bandwidth / --flops it measures this machine's CPU now; a GPU run takes the datasheet figures of --device-name.
"""

from __future__ import annotations

import argparse
from typing import Any

from perfsuite.commands._common import add_command


def register(sub: Any) -> None:
    p = add_command(sub, "roofline", "the roofline of each cell of a results file", __doc__, main)
    from perfsuite.roofline_results import add_arguments  # light: no torch, no numpy

    add_arguments(p)


def main(args: argparse.Namespace) -> int:
    import json

    from perfsuite import roofline_results
    from perfsuite.errors import UsageError

    if not args.results.is_file():
        raise UsageError(f"{args.results}: no such results file; pass a JSON file written with --benchmark-json")
    try:
        json.loads(args.results.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{args.results}: not a readable JSON results file ({exc}); pass a file written with "
                         "--benchmark-json") from None
    return roofline_results.run(args)
