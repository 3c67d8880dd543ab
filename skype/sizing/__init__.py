"""Sizing DSkype: measured per-partition costs and a projection to executor counts.

Two modules, neither imports pyspark:

* :mod:`skype.sizing.partitions`: the measurement harness.  It routes a workload as the
  Spark job does (:class:`skype.dskype.routing.Router` over the run's distribution) and runs
  every partition's :class:`~skype.dskype.partition.PartitionCore` in this process on its routed
  share, timing each partition's batches and reading its memory (the engine's own accounting,
  and the process's resident set).
* :mod:`skype.sizing.model`: the projection.  It fits, per method, how a partition's time per
  message and memory grow with the subscriptions and the window, and projects throughput,
  executor memory and executor count for a number of subscriptions, with a fixed cost per batch
  fitted on Spark runs.

The guide is ``docs/spark.md`` ("How many executors do I need"); the measurements and the check
against Spark runs are in ``docs/results/2026-11-29-spark-sizing.md``.
"""
