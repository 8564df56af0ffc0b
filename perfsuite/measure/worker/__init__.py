"""Measurement in worker processes: the worker times, the coordinator only spawns, orders and collects.

Between processes the same code differs far more than inside one (per-process memory placement, thread
placement, machine modes), so a verdict needs many process-level values, not longer runs of one process.

* :mod:`perfsuite.measure.worker.job` -- what a worker is asked to measure and what it ships back (plain JSON).
* :mod:`perfsuite.measure.worker.child` -- runs inside the worker: backend -> load -> perfsuite.measure.loop's loops -> close.
* :mod:`perfsuite.measure.worker.__main__` -- ``python -m perfsuite.measure.worker``: a pre-imported "zygote" that forks one fresh
  child per job (``serve``), or one job in a fresh interpreter (``run``; engines that must not be forked: vLLM).
* :mod:`perfsuite.measure.worker.pool` -- the coordinator's side: one :class:`~perfsuite.measure.worker.pool.Side` (a source tree
  and an interpreter) per worker pool, so ``perfsuite ab`` runs each side's own code.

Nothing here imports torch in the coordinator.
"""
