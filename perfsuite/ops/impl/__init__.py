"""Op definitions of :mod:`perfsuite.ops.registry`."""
