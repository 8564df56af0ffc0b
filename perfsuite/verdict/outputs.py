"""The outputs guard (docs/gate.md, "Outputs guard"): did this run generate the tokens the baselines generated? Each
test's token ids (perfsuite.facts.metrics.outputs_record) against the newest comparable baseline run's; a backend
whose tokens are not bit-identical from run to run on a runner class is held to its first ``first_n`` tokens only
(``TOLERANCE``, each entry with its evidence)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

# backend -> (first_n, evidence). Empty: every backend measured so far generated identical tokens in every process and
# run on the CPU runner classes (docs/gate.md, "Outputs guard").
TOLERANCE: dict[str, tuple[int, str]] = {}


@dataclass(frozen=True)
class OutputsCheck:
    kind: str  # same | changed | unknown
    message: str = ""
    prompt: int | None = None
    position: int | None = None
    baseline_token: int | None = None
    token: int | None = None


def first_difference(base: Sequence[Sequence[int]], cur: Sequence[Sequence[int]], first_n: int | None = None
                     ) -> tuple[int, int, int | None, int | None] | None:
    """(prompt, position, baseline token, this run's token) of the first difference within ``first_n`` tokens of
    each prompt (None: all), or None when they agree; a missing token is None."""
    for p, (b, c) in enumerate(zip_longest(base, cur, fillvalue=())):
        for i, (bt, ct) in enumerate(zip_longest(b[:first_n], c[:first_n])):
            if bt != ct:
                return p, i, bt, ct
    return None


def check(current: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None, backend: str) -> OutputsCheck:
    """This test's outputs against one comparable baseline run's (both ``extra_info["outputs"]``)."""
    if not current or not current.get("tokens"):
        return OutputsCheck("unknown", "this run recorded no outputs")
    if not baseline or not baseline.get("tokens"):
        return OutputsCheck("unknown", "the baseline runs recorded no outputs (recorded before the outputs guard; "
                                       "re-record them to guard outputs)")
    first_n, evidence = TOLERANCE.get(backend, (None, ""))
    if first_n is None and set(current.get("digests", [])) == set(baseline.get("digests", [])) \
            and current["tokens"] == baseline["tokens"]:
        return OutputsCheck("same")
    diff = first_difference(baseline["tokens"], current["tokens"], first_n)
    if diff is None and first_n is None:  # the first generations agree, a later one does not
        return OutputsCheck("changed", "outputs changed: a later generation's tokens differ from the baselines' "
                                       f"(digests {sorted(current.get('digests', []))} vs "
                                       f"{sorted(baseline.get('digests', []))})")
    if diff is None:
        return OutputsCheck("same", f"first {first_n} tokens of each prompt agree ({evidence})")
    p, i, bt, ct = diff
    scope = f" (within the first {first_n} tokens: {evidence})" if first_n is not None else ""
    return OutputsCheck("changed", f"outputs changed: prompt {p}, token {i}: {bt} in the baselines, {ct} in this "
                                   f"run{scope}", p, i, bt, ct)
