"""Screen, then confirm (docs/gate.md): ``worktree`` (A's tree: the baselines' commit), ``machine`` (hardware identity,
the start-up probe and library versions against the baselines'), ``session`` (the orchestration in the pytest
session); the pure parts are perfsuite.verdict.confirm_config and perfsuite.verdict.confirm_decision."""
