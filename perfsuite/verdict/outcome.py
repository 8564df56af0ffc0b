"""What the gate says of one test, as values: :class:`GateOutcome` and the warning classes it carries. No pytest
here: the pytest adapter raises an outcome in the calling test (perfsuite.adapters.pytest.hooks.enforce)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GateOutcome:
    """Skip the test with ``skip`` (nothing measured it; the worker said why), fail it with ``failure``, else pass
    it with ``warnings``."""

    failure: str | None = None
    warnings: list[Warning] = field(default_factory=list)
    skip: str | None = None


class GateInconclusive(UserWarning):
    """The stored baselines could not decide a gated metric of this test (see the message for the MDE and the
    `perfsuite ab` command that would)."""


class GateDrift(UserWarning):
    """The stored baselines flagged a regression that an A/B against the baselines' commit refuted: this machine
    runs slower or faster than when the baselines were recorded (the message says by how much and what to do)."""


class GateUnconfirmed(UserWarning):
    """A stored-baseline regression that could not be confirmed (the reason and the fix); with
    ``on_unconfirmed = "warn"`` it passes with this warning."""


class GateIncomparable(UserWarning):
    """Nothing compared: the baselines were recorded on other hardware (a forced runner class)."""
