"""Layer 4, verdict: pure functions of values (no process spawned, no file written; docs/gate.md): what is compared
(``values``), the estimates (``estimate``, ``stats``), the decision and its words (``decide``, ``report``), the screen
of a session (``screen``), run files (``runs``), the A/B rule (``sequential``), ``noise``, ``changepoint``,
the confirmation's meaning (``confirm_decision``) and a test's ``outcome``."""
