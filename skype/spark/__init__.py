"""DSkype on Apache Spark: the thin adapter that runs :mod:`skype.dskype` as a Structured
Streaming job (the only package that imports pyspark).

Data flow of one micro-batch (see ``docs/spark.md``)::

    messages source ─┐                     ┌─ partition 0 ─┐
                     ├─ route (mapInArrow) ┼─ ...          ┼─ merge buckets ─ events sink
    commands source ─┘   + ticks           └─ partition P-1┘   (exact top-k)   + final results

Modules: :mod:`~skype.spark.sources` and :mod:`~skype.spark.ingest` (stream sources),
:mod:`~skype.spark.processors` (``transformWithState`` processors), :mod:`~skype.spark.hosts`
(engine hosts), :mod:`~skype.spark.backfill` (window read-back), :mod:`~skype.spark.sink`
(``foreachBatch``), :mod:`~skype.spark.runtime` (the job), :mod:`~skype.spark.app`.
"""

