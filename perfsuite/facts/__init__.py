"""Layer 1, facts: what a cell, a model, a metric and the configuration are; imports no other layer.

``PACKAGE_FILE`` and ``TREE`` say where this perfsuite is imported from (the tree a worker of "this side" runs);
:func:`identity_hash` is the one short digest of what makes a workload."""

import hashlib
import json
from pathlib import Path
from typing import Any

PACKAGE_FILE = str(Path(__file__).resolve().parent.parent / "__init__.py")  # what ``perfsuite.__file__`` is
TREE = Path(PACKAGE_FILE).parent.parent  # the folder that holds the perfsuite package


def identity_hash(identity: dict[str, Any], separators: tuple[str, str] = (",", ":"), n: int = 12) -> str:
    """The one options hash: ``n`` hex digits of the sorted JSON of what makes a cell's workload (a latency cell's
    :func:`identity_of`, a serving cell's load point; also preset, AWQ and config digests). ``separators`` only
    keeps hashes already stored stable."""
    blob = json.dumps(identity, sort_keys=True, separators=separators, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]
