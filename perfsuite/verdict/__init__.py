"""Layer 4, verdict: pure functions of values. What is compared (``values``), the log-ratio estimates (``estimate``,
``stats``), the decision (``decide``) and its words (``report``), the stored-baseline screen of a pytest session
(``screen``), run files against run files (``runs``), the sequential A/B rule (``sequential``), the noise model
(``noise``), change points (``changepoint``), what a confirmation's A/B means (``confirm_decision``) and the outcome of
a test (``outcome``). No process is spawned here and no file is written; see docs/gate.md."""
