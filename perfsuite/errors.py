"""The one error type every ``perfsuite`` command raises for bad input.

``perfsuite.cli.main`` turns it into one line on stderr, ``perfsuite <command>: <message>``, and exit status 2.
A message names what was wrong, where, and the fix.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input to a command (a path, an option value, a file's content); exit status 2, one line."""
