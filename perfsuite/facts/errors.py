"""The error type that ``perfsuite.cli.main`` turns into one line on stderr, ``perfsuite <command>: <message>``, and
exit status 2. A message names what was wrong, where, and the fix.

It and its subclasses (HistoryError, ProbeError) are the only errors the CLI catches. Other modules raise their own
(ConfigError, PolicyError, ProfileError, OptionError and 26 more, each beside the code that raises it), which a
command re-raises as a UsageError where they mean bad input. argparse's own errors also exit 2; ``perfsuite run``
outside a checkout exits 1 (``commands._common.project_root``).
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input to a command (a path, an option value, a file's content); exit status 2, one line."""
