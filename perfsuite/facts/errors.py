"""The error ``perfsuite.cli.main`` turns into one line on stderr, ``perfsuite <command>: <message>``, and exit status
2; a message names what was wrong, where, and the fix. It and its subclasses (HistoryError, ProbeError) are the only
errors the CLI catches: a command re-raises another module's own error (ConfigError, PolicyError, ...) as a UsageError
where it means bad input."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class UsageError(Exception):
    """Bad input to a command (a path, an option value, a file's content); exit status 2, one line."""


@contextlib.contextmanager
def reraise_as(target: type[Exception], *errors: type[Exception]) -> Iterator[None]:
    """Re-raise another module's ``errors`` as ``target`` with the same message, the original's chain hidden."""
    try:
        yield
    except errors as exc:
        raise target(str(exc)) from None
