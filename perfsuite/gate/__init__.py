"""Regression gate: verdicts with intervals and minimum detectable effects, between-run variance included.

See docs/gate.md. The pytest plugin uses :func:`make_session` / :class:`GateSession`; ``perfsuite compare``,
``perfsuite ab`` and ``perfsuite calibrate`` use :func:`compare_runs` and :func:`compare_paired`.
"""

from perfsuite.gate.compare import compare_paired, compare_runs
from perfsuite.gate.load import InputError, load_runs
from perfsuite.gate.policy import DEFAULT_POLICIES, GateConfig, Override, Policy, PolicyError, parse_config
from perfsuite.gate.pytest_support import GateSession, make_session
from perfsuite.gate.verdict import KINDS, Verdict

__all__ = [
    "DEFAULT_POLICIES",
    "KINDS",
    "GateConfig",
    "GateSession",
    "InputError",
    "Override",
    "Policy",
    "PolicyError",
    "Verdict",
    "compare_paired",
    "compare_runs",
    "load_runs",
    "make_session",
    "parse_config",
]
