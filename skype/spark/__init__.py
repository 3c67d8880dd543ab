"""DSkype on Apache Spark: a Structured Streaming job (the only package that imports pyspark).

Data flow of one micro-batch (see ``docs/spark.md``)::

    messages source ─┐                     ┌─ partition 0 ─┐
                     ├─ route (mapInArrow) ┼─ ...          ┼─ merge buckets ─ events sink
    commands source ─┘   + ticks           └─ partition P-1┘   (exact top-k)   + final results

Modules without pyspark (usable in engine hosts and tests): :mod:`~skype.spark.codec` (blobs),
:mod:`~skype.spark.keys` (grouping keys), :mod:`~skype.spark.routing`,
:mod:`~skype.spark.partition`, :mod:`~skype.spark.merge`, :mod:`~skype.spark.reports`,
:mod:`~skype.spark.durable`, :mod:`~skype.spark.hosts`, :mod:`~skype.spark.staging`,
:mod:`~skype.spark.vocabulary` (the shipped vocabulary), :mod:`~skype.spark.records` (raw records),
:mod:`~skype.spark.ordering` (Kafka order).
Modules importing pyspark: :mod:`~skype.spark.processors`, :mod:`~skype.spark.sources`,
:mod:`~skype.spark.ingest`, :mod:`~skype.spark.runtime`, :mod:`~skype.spark.app`.
"""
