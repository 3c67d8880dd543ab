"""DSkype on Apache Spark: the thin adapter that runs :mod:`skype.dskype` as a Structured
Streaming job (the only package that imports pyspark).

Data flow of one micro-batch (see ``docs/spark-design.md``)::

    messages source ─┐                     ┌─ partition 0 ─┐
                     ├─ route (mapInArrow) ┼─ ...          ┼─ merge buckets ─ events sink
    commands source ─┘   + ticks           └─ partition P-1┘   (exact top-k)   + final results

Entry: :func:`run` (``skype.spark.run(settings, workload, spark=None)``, :mod:`~skype.spark.job`).
Modules: :mod:`~skype.spark.sources` and :mod:`~skype.spark.ingest` (stream sources),
:mod:`~skype.spark.readers` (stream-directory readers), :mod:`~skype.spark.session` (the session),
:mod:`~skype.spark.processors` (``transformWithState`` processors), :mod:`~skype.spark.hosts`
(engine hosts), :mod:`~skype.spark.backfill` (window read-back), :mod:`~skype.spark.sink`
(``foreachBatch``), :mod:`~skype.spark.runtime` (the job).  The spark-submit entry is a CLI:
:mod:`skype.cli.spark_submit`.
"""


def run(settings, workload, spark=None, **options) -> dict:
    """Plan, stream and measure one run; returns its metrics (:func:`skype.spark.job.run`, whose
    keyword ``options`` it takes).  Importing :mod:`skype.spark` does not import pyspark."""
    from skype.spark.job import run as run_job

    return run_job(settings, workload, spark, **options)
