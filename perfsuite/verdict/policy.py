"""``[tool.perfsuite.gate]`` -> frozen dataclasses (the schema and its defaults: docs/gate.md, "Configuration").
Every invalid key or value raises :class:`PolicyError` naming the key, what is allowed and the fix. An override
(a glob on the cell id or the test name; a later match wins) changes every policy of what it matches, or one metric's::

    [tool.perfsuite.gate.overrides."onnxruntime-cpu-*"]
    threshold = 0.10
    median_ttft_ms = { threshold = 0.2, enabled = true }
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfsuite.facts import vocabulary
from perfsuite.facts.config import find_pyproject, tomllib
from perfsuite.facts.schema import Field, first_unknown
from perfsuite.verdict import confirm_config

DIRECTIONS = ("lower_is_better", "higher_is_better")
EXACT_DIRECTIONS = ("lower_is_better", "higher_is_better", "equal")
_LAT = vocabulary.LATENCY_NAME
_STATS = re.compile(r"^stats\.(min|max|mean|median)$")
THROUGHPUT = vocabulary.THROUGHPUT
EXACT_METRICS = vocabulary.EXACT
METRIC_HELP = vocabulary.policy_help()
_WHERE = "[tool.perfsuite.gate]"


class PolicyError(ValueError):
    """Invalid ``[tool.perfsuite.gate]``; the message names the key, the allowed values and the fix."""


@dataclass(frozen=True)
class Policy:
    metric: str
    direction: str = "lower_is_better"
    threshold: float = 0.03
    exact: bool = False
    tolerance: float = 0.0  # exact only: relative slack
    abs_tolerance: float = 0.0  # exact only: absolute slack
    tests: tuple[str, ...] = ("*",)
    enabled: bool = True

    def applies_to(self, test_name: str) -> bool:
        base = test_name.split("::")[-1]
        return self.enabled and any(fnmatch.fnmatchcase(base, g) or fnmatch.fnmatchcase(test_name, g)
                                    for g in self.tests)


@dataclass(frozen=True)
class Override:
    pattern: str
    common: tuple[tuple[str, Any], ...] = ()
    per_metric: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()


@dataclass(frozen=True)
class GateConfig:
    alpha: float = 0.01
    power: float = 0.8
    baseline_runs: int = 10
    ab_threshold: float = 0.01
    ab_margin: float = 0.02
    min_run_cv: float | None = None
    policies: tuple[Policy, ...] = field(default_factory=lambda: DEFAULT_POLICIES)
    overrides: tuple[Override, ...] = ()
    confirm: confirm_config.ConfirmConfig = field(default_factory=confirm_config.ConfirmConfig)  # the A/B of a screen

    def newest(self, runs: list[Any]) -> list[Any]:
        """The newest ``baseline_runs`` of ``runs`` (oldest first): the baseline the gate compares against."""
        return runs[-self.baseline_runs:]

    def policies_for(self, cell_id: str, test_name: str) -> list[Policy]:
        """The policies of one benchmark, overrides applied in file order (a later match wins)."""
        out = []
        for pol in self.policies:
            for ov in self.overrides:
                if fnmatch.fnmatchcase(cell_id, ov.pattern) or fnmatch.fnmatchcase(test_name, ov.pattern):
                    changes = {**dict(ov.common), **dict(dict(ov.per_metric).get(pol.metric, ()))}
                    other_kind = ("threshold",) if pol.exact else ("tolerance", "abs_tolerance")
                    pol = replace(pol, **{k: v for k, v in changes.items() if k not in other_kind})
            if pol.applies_to(test_name):
                out.append(pol)
        return out


DEFAULT_POLICIES: tuple[Policy, ...] = (
    Policy("median_tpot_ms", threshold=0.03, tests=("test_tpot*",)),
    Policy("median_ttft_ms", threshold=0.05, tests=("test_ttft*",)),
    Policy("median_e2el_ms", threshold=0.03, tests=("test_e2el*",)),
    Policy("generated_tokens", direction="equal", exact=True),
)

_POLICY = {"metric", "direction", "threshold", "exact", "tolerance", "abs_tolerance", "tests", "enabled"}


def _err(key: str, got: Any, allowed: str, fix: str = "") -> PolicyError:
    return PolicyError(f"{_WHERE} {key} = {got!r} is invalid; allowed: {allowed}" + (f"; {fix}" if fix else ""))


_BOOL = Field("bool")
_THRESHOLD = Field("float", "relative threshold", minimum=0.0, maximum=1.0, max_open=True)
_TOLERANCE = Field("float", "relative slack of an exact metric", minimum=0.0, maximum=10.0)
_ABS_TOLERANCE = Field("float", "absolute slack of an exact metric", minimum=0.0, maximum=float("inf"))
_TOP_FIELDS = {
    "alpha": Field("float", "family-wise false-alarm rate", minimum=0.0, maximum=0.5, min_open=True, max_open=True),
    "power": Field("float", "power at which the MDE is reported", minimum=0.5, maximum=1.0, max_open=True),
    "baseline_runs": Field("int", "newest comparable baseline runs used", minimum=1, maximum=10_000),
    "ab_threshold": Field("float", "perfsuite ab: regression threshold", minimum=0.0, maximum=1.0, max_open=True),
    "ab_margin": Field("float", "perfsuite ab: equivalence margin", minimum=0.0, maximum=1.0, min_open=True,
                       max_open=True),
    "min_run_cv": Field("float", "floor of the between-run CV", minimum=0.0, maximum=1.0, max_open=True),
}
_TOP = {*_TOP_FIELDS, "policies", "overrides", *confirm_config.KEYS}
# An override's tolerance may exceed a policy's 10x (it loosens a policy for a few cells only).
_OVERRIDE_FIELDS = {"threshold": _THRESHOLD, "tolerance": _ABS_TOLERANCE, "abs_tolerance": _ABS_TOLERANCE,
                    "enabled": _BOOL}


def _checked(key: str, v: Any, spec: Field) -> Any:
    """``v`` if ``spec`` allows it, else the gate's PolicyError naming what is allowed."""
    if spec.problem(v):
        raise _err(key, v, spec.expects())
    return float(v) if spec.kind == "float" else v


def check_metric(key: str, metric: Any) -> str:
    if not isinstance(metric, str) or not (_LAT.match(metric) or _STATS.match(metric) or metric in THROUGHPUT
                                           or metric in EXACT_METRICS):
        names = [f"{s}_{m}_ms" for s in ("min", *vocabulary.SUMMARIES) for m in vocabulary.LATENCIES]
        names += [*THROUGHPUT, *EXACT_METRICS, "stats.min", "stats.median", "stats.mean", "stats.max"]
        close = difflib.get_close_matches(str(metric), names, n=1)
        fix = f"did you mean {close[0]!r}?" if close else "spell the metric as vLLM/perfsuite names it in extra_info"
        raise _err(key, metric, METRIC_HELP, fix)
    return metric


def default_direction(metric: str) -> str:
    """Which way is better: the vocabulary's word for a name it owns (``generated_tokens``: equal); otherwise a
    throughput (a serving key) is higher-is-better and anything else (``stats.*``: times) lower-is-better."""
    if (known := vocabulary.describe(metric)) is not None:
        return known.direction
    return "higher_is_better" if "throughput" in metric else "lower_is_better"


def _policy(i: int, raw: Any) -> Policy:
    where = f"policies[{i}]"
    if not isinstance(raw, Mapping):
        raise _err(where, raw, "a table ([[tool.perfsuite.gate.policies]])")
    k = first_unknown(raw, _POLICY)
    if k is not None:
        raise _err(f"{where}.{k}", raw[k], f"keys {', '.join(sorted(_POLICY))}", "remove or rename the key")
    if "metric" not in raw:
        raise _err(f"{where}.metric", None, METRIC_HELP, "every policy names its metric")
    metric = check_metric(f"{where}.metric", raw["metric"])
    exact = _checked(f"{where}.exact", raw.get("exact", metric in EXACT_METRICS), _BOOL)
    if metric in EXACT_METRICS and not exact:
        raise _err(f"{where}.exact", False, "true for " + metric,
                   "counts and peak memory are deterministic enough to gate exactly (add a tolerance if needed)")
    allowed_dirs = EXACT_DIRECTIONS if exact else DIRECTIONS
    direction = raw.get("direction", default_direction(metric))
    if direction not in allowed_dirs:
        raise _err(f"{where}.direction", direction, ", ".join(allowed_dirs))
    if exact and "threshold" in raw:
        raise _err(f"{where}.threshold", raw["threshold"], "no threshold on an exact metric",
                   "use tolerance (relative) or abs_tolerance for exact metrics")
    if not exact and ("tolerance" in raw or "abs_tolerance" in raw):
        key = "tolerance" if "tolerance" in raw else "abs_tolerance"
        raise _err(f"{where}.{key}", raw[key], "only with exact = true", "use threshold for statistical metrics")
    threshold = _checked(f"{where}.threshold", raw.get("threshold", 0.03), _THRESHOLD)
    tol = _checked(f"{where}.tolerance", raw.get("tolerance", 0.0), _TOLERANCE)
    atol = _checked(f"{where}.abs_tolerance", raw.get("abs_tolerance", 0.0), _ABS_TOLERANCE)
    tests = raw.get("tests", ["*"])
    if isinstance(tests, str):
        tests = [tests]
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t for t in tests):
        raise _err(f"{where}.tests", tests, "a non-empty list of test-name globs, e.g. [\"test_tpot*\"]")
    enabled = _checked(f"{where}.enabled", raw.get("enabled", True), _BOOL)
    return Policy(metric, direction, threshold, exact, tol, atol, tuple(tests), enabled)


def _override_values(where: str, raw: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    out = []
    for k, v in raw.items():
        if k not in _OVERRIDE_FIELDS:
            raise _err(f"{where}.{k}", v, f"keys {', '.join(sorted(_OVERRIDE_FIELDS))} or a metric table",
                       "remove or rename the key")
        out.append((k, _checked(f"{where}.{k}", v, _OVERRIDE_FIELDS[k])))
    return tuple(out)


def parse_config(raw: Mapping[str, Any] | None) -> GateConfig:
    """Parse ``[tool.perfsuite.gate]`` (a mapping as tomllib returns it; empty/None = defaults)."""
    raw = dict(raw or {})
    k = first_unknown(raw, _TOP)
    if k is not None:
        raise _err(k, raw[k], f"keys {', '.join(sorted(_TOP))}", "remove or rename the key")
    top = {k: _checked(k, raw.get(k, getattr(GateConfig, k)), spec) for k, spec in _TOP_FIELDS.items()
           if k in raw or getattr(GateConfig, k) is not None}
    pols_raw = raw.get("policies")
    if pols_raw is not None and (not isinstance(pols_raw, list) or not pols_raw):
        raise _err("policies", pols_raw, "a non-empty array of tables ([[tool.perfsuite.gate.policies]])")
    policies = DEFAULT_POLICIES if pols_raw is None else tuple(_policy(i, p) for i, p in enumerate(pols_raw))
    names = [(p.metric, p.tests) for p in policies]
    if len(set(names)) != len(names):
        raise _err("policies", [p.metric for p in policies], "each metric once per test selection",
                   "merge the duplicate policies or give them disjoint `tests`")
    ovs_raw = raw.get("overrides", {})
    if not isinstance(ovs_raw, Mapping):
        raise _err("overrides", ovs_raw, 'tables [tool.perfsuite.gate.overrides."<cell-id glob>"]')
    overrides = []
    for pattern, body in ovs_raw.items():
        where = f'overrides."{pattern}"'
        if not isinstance(body, Mapping):
            raise _err(where, body, "a table of threshold / tolerance / abs_tolerance / enabled or metric tables")
        common = {k: v for k, v in body.items() if not isinstance(v, Mapping)}
        per = []
        for k, v in body.items():
            if isinstance(v, Mapping):
                check_metric(f"{where}.{k}", k)
                if k not in {p.metric for p in policies}:
                    raise _err(f"{where}.{k}", dict(v), "a metric that has a policy: "
                               + ", ".join(p.metric for p in policies), "add a policy for it first")
                per.append((k, _override_values(f"{where}.{k}", v)))
        overrides.append(Override(str(pattern), _override_values(where, common), tuple(per)))
    return GateConfig(**top, policies=policies, overrides=tuple(overrides), confirm=confirm_config.parse(raw, _err))


def load_config(pyproject: Any = None, **cli: Any) -> GateConfig:
    """``[tool.perfsuite.gate]`` of ``pyproject`` (default: the perfsuite pyproject.toml above the working
    directory; none = defaults), with non-None ``cli`` values (alpha, baseline_runs, ...) on top."""
    path = Path(pyproject) if pyproject else find_pyproject(Path.cwd())
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = dict(tomllib.loads(path.read_text(encoding="utf8")).get("tool", {}).get("perfsuite", {})
                       .get("gate", {}))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise PolicyError(f"{path}: cannot read [tool.perfsuite.gate] ({exc}); fix the file or pass --config"
                              ) from None
    raw.update({k: v for k, v in cli.items() if v is not None})
    return parse_config(raw)
