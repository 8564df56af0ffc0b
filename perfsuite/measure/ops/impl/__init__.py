"""Op definitions of :mod:`perfsuite.measure.ops.registry`."""
