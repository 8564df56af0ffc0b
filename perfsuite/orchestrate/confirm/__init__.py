"""Screen, then confirm: a stored-baseline regression of ``pytest --benchmark-compare`` is confirmed (or refuted as
drift of this machine) by a two-tree A/B against the baseline's own commit, in the same session (docs/gate.md).

Layout: ``config`` (the ``[tool.perfsuite.gate]`` keys), ``decision`` (pure: what a finding means for a test),
``worktree`` (A's tree: a temporary git worktree of the baseline's commit), ``machine`` (hardware identity and the
start-up probe against the baselines'), ``session`` (the orchestration inside the pytest session). Light to import:
perfsuite.verdict.policy imports ``config``.
"""
