"""DSkype's distributed runtime, without Spark: what a partition, a merge bucket and the driver do
with one micro-batch, as plain Python over typed arrays.  :mod:`skype.spark` is the thin adapter
that runs it as a Structured Streaming job (the only package that imports pyspark).

Invariant: no module here imports pyspark, so the whole protocol runs (and is tested) in one
process without a JVM.

- Executors: :mod:`~skype.dskype.partition` (a partition's batch), :mod:`~skype.dskype.merge`
  (exact top-k of the replicas), :mod:`~skype.dskype.floors` (the merge's global k-th score
  floors, which let replicas skip admissions), :mod:`~skype.dskype.reports` (the rows a partition emits),
  :mod:`~skype.dskype.window` (the window share), :mod:`~skype.dskype.hosted` (the hosted
  records), :mod:`~skype.dskype.durable` (the durable log), :mod:`~skype.dskype.activation`
  (``prefix``'s loose-prefix activation), :mod:`~skype.dskype.summaries` (keyword summaries),
  :mod:`~skype.dskype.handover` (adaptive methods' hand-over), :mod:`~skype.dskype.kinds`
  (range/knn/terms subscriptions), :mod:`~skype.dskype.snapshots` (snapshot queries at the
  partitions' stream position), :mod:`~skype.dskype.work` (a partition engine's work counters
  per batch), :mod:`~skype.dskype.files` (atomic commits of side files).
- Stream records: :mod:`~skype.dskype.codec` (blobs), :mod:`~skype.dskype.records` (raw records),
  :mod:`~skype.dskype.routing` (the router), :mod:`~skype.dskype.screening`
  (poison records out, into dead letters), :mod:`~skype.dskype.stamps` (what a
  routed row says it was routed by), :mod:`~skype.dskype.ordering` (Kafka order),
  :mod:`~skype.dskype.keys` (grouping keys), :mod:`~skype.dskype.vocabulary` (the shipped
  vocabulary), :mod:`~skype.dskype.staging` (staged inputs).
- Driver: :mod:`~skype.dskype.plan` (the run's plan), :mod:`~skype.dskype.results` (metrics and
  final results), :mod:`~skype.dskype.rebalancing` (live rebalancing decisions),
  :mod:`~skype.dskype.loadstats` (an adaptive pipeline's load statistics from the partitions'
  reports).
"""
