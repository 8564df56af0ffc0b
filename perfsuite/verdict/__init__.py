"""Regression gate: verdicts with intervals and minimum detectable effects, between-run noise included.

See docs/gate.md. Layout: ``values`` (what is compared, read from run files), ``estimate`` (log-ratio
estimates), ``stats`` (pure statistics), ``verdict`` (decisions), ``report`` (formatting), ``in_pytest``
(the plugin's :class:`GateSession`), ``runs`` (``perfsuite compare``), ``sequential`` (``perfsuite ab``).
"""

from perfsuite.orchestrate.load import InputError, load_runs
from perfsuite.verdict.decide import KINDS, Verdict
from perfsuite.verdict.policy import DEFAULT_POLICIES, GateConfig, Override, Policy, PolicyError, parse_config
from perfsuite.verdict.runs import compare_runs
from perfsuite.verdict.screen import GateSession, is_contended, make_session

__all__ = ["DEFAULT_POLICIES", "KINDS", "GateConfig", "GateSession", "InputError", "Override", "Policy", "PolicyError",
           "Verdict", "compare_runs", "is_contended", "load_runs", "make_session", "parse_config"]
