"""Measurement in worker processes: the worker times (child), the coordinator only spawns, orders and collects
(pool, zygote); the job and its result are plain JSON (job); ``python -m perfsuite.measure.worker`` is the worker.
Between processes the same code differs far more than inside one, so a verdict needs many process-level values
(docs/gate.md, "The unit is a process"). Nothing here imports torch in the coordinator.
"""
