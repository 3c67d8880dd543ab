"""Streaming sources of messages and subscription commands, all yielding the stream-event schema.

**Files (default): the ``skype_stream`` Python data source.**  A directory of stream files
(:mod:`skype.dskype.staging`), read in file-name order.  The offset is the number of records
consumed, so a record's *position* is stable across restarts: for messages it is the global
sequence number ``seq``, for commands their ordinal ``cseq``.  ``maxRecordsPerTrigger`` caps a
micro-batch (``--batch-size`` messages per batch); with ``trigger(availableNow=True)`` the source
fixes its end at the start and still honours the cap, so the batches are exactly those of a
live run.  New files may be added while the query runs; they must sort after the files already
seen (checked) and appear complete (written under a hidden name and renamed).

**Kafka (optional): :func:`kafka_events`.**  Each record's value is one stream-file record as
JSON.  A message's ``seq`` is its Kafka offset, so the messages topic must have one partition (a
total order); commands' ``cseq`` is their offset likewise.  Needs Spark's Kafka connector on the
classpath (``--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from skype.errors import InputError
from skype.dskype.routing import (EVENT_SCHEMA_DDL, KIND_MESSAGE, KIND_QUERY, KIND_RESULTS, KIND_SUBSCRIBE,
                                 KIND_UNSUBSCRIBE, event_arrow_schema)

SOURCE_NAME = "skype_stream"
KINDS = ("messages", "commands")


def _file_format(name: str) -> str | None:
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return None


def _record_schema(kind: str):
    import pyarrow as pa

    terms = [("term_ids", pa.list_(pa.int64())), ("weights", pa.list_(pa.float64()))]
    if kind == "messages":
        return pa.schema([("id", pa.int64()), ("x", pa.float64()), ("y", pa.float64()), ("t", pa.float64()), *terms])
    return pa.schema([("op", pa.string()), ("at", pa.int64()), ("id", pa.int64()), ("x", pa.float64()),
                      ("y", pa.float64()), ("k", pa.int64()), ("alpha", pa.float64()), *terms,
                      ("spec", pa.string())])  # spec: a range/knn/terms query (skype.dskype.kinds)


def read_stream_file(path: str, kind: str):
    """A stream file as a pyarrow Table with the record schema of ``kind``."""
    import pyarrow as pa

    fmt = _file_format(path)
    schema = _record_schema(kind)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    elif fmt == "jsonl":
        import pyarrow.json as pj

        table = pj.read_json(path, parse_options=pj.ParseOptions(explicit_schema=schema,
                                                                 unexpected_field_behavior="ignore"))
    else:
        raise InputError("E024", path=path)
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    return pa.table(cols, schema=schema)


def count_records(path: str) -> int:
    if _file_format(path) == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def to_events(table, kind: str, first_position: int):
    """Stream-file records -> a RecordBatch of the stream-event schema; positions from
    ``first_position`` (``seq`` of messages, ``cseq`` of commands)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    schema = event_arrow_schema()
    position = pa.array(np.arange(first_position, first_position + n, dtype=np.int64))
    if kind == "messages":
        kind_col = pa.array(np.full(n, KIND_MESSAGE, np.int8))
        cols = {"kind": kind_col, "seq": position, "at": pa.nulls(n, pa.int64()), "k": pa.nulls(n, pa.int64()),
                "alpha": pa.nulls(n, pa.float64()), "spec": pa.nulls(n, pa.string())}
    else:
        op = table.column("op").combine_chunks()
        bad = pc.invert(pc.is_in(op, value_set=pa.array(["sub", "unsub", "results", "query"]))).fill_null(True)
        if pc.any(bad).as_py():
            row = int(np.flatnonzero(np.asarray(bad))[0])
            raise InputError("E086", op=op[row].as_py())
        kind_col = pc.if_else(pc.equal(op, "sub"), pa.scalar(KIND_SUBSCRIBE, pa.int8()),
                              pc.if_else(pc.equal(op, "results"), pa.scalar(KIND_RESULTS, pa.int8()),
                                         pc.if_else(pc.equal(op, "query"), pa.scalar(KIND_QUERY, pa.int8()),
                                                    pa.scalar(KIND_UNSUBSCRIBE, pa.int8()))))
        cols = {"kind": kind_col, "seq": position, "at": table.column("at"), "k": table.column("k"),
                "alpha": table.column("alpha"), "t": pa.nulls(n, pa.float64()),
                "spec": table.column("spec") if "spec" in table.column_names else pa.nulls(n, pa.string())}
    arrays = []
    for field in schema:
        col = cols[field.name] if field.name in cols else table.column(field.name)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        arrays.append(col.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class FilePiece:
    path: str
    skip: int
    take: int
    first_position: int


_last_table: dict[str, object] = {}  # per worker: the last file read (consecutive batches share files)


class StreamFilesReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"records": n}``: the first n records (files in name order) are consumed."""

    def __init__(self, path: str, kind: str, max_records: int | None) -> None:
        if kind not in KINDS:
            raise InputError("E022", what="stream kind", value=kind, choices=", ".join(KINDS))
        self.path = path
        self.kind = kind
        self.max_records = max_records
        self.files: list[tuple[str, int]] = []  # (name, records), name order
        self.target: int | None = None  # availableNow: the end fixed at the start

    def _refresh(self) -> int:
        names = sorted(n for n in os.listdir(self.path) if not n.startswith((".", "_")) and _file_format(n))
        known = {n for n, _ in self.files}
        for name in names:
            if name in known:
                continue
            if self.files and name < self.files[-1][0]:
                raise InputError("E023", what=f"new stream file {name!r}",
                                 expected=f"named after the files already read (last: {self.files[-1][0]!r})",
                                 value=name)
            self.files.append((name, count_records(os.path.join(self.path, name))))
        return sum(n for _, n in self.files)

    def initialOffset(self) -> dict:
        return {"records": 0}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._refresh()

    def latestOffset(self, start: dict, limit) -> dict:
        total = self._refresh()
        if self.target is not None:
            total = min(total, self.target)
        begin = int(start["records"]) if start else 0
        if isinstance(limit, ReadMaxRows):
            total = min(total, begin + int(limit.max_rows))
        return {"records": max(begin, total)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = int(start["records"]), int(end["records"])
        if stop > sum(n for _, n in self.files):
            self._refresh()
        pieces = []
        offset = 0
        for name, count in self.files:
            lo, hi = max(begin, offset), min(stop, offset + count)
            if lo < hi:
                pieces.append(InputPartition(FilePiece(os.path.join(self.path, name), lo - offset, hi - lo, lo)))
            offset += count
        return pieces

    def read(self, partition: InputPartition):
        piece: FilePiece = partition.value
        table = _last_table.get(piece.path)
        if table is None:
            table = read_stream_file(piece.path, self.kind)
            _last_table.clear()
            _last_table[piece.path] = table
        yield to_events(table.slice(piece.skip, piece.take), self.kind, piece.first_position)

    def commit(self, end: dict) -> None:
        pass


class StreamFilesSource(DataSource):
    """``spark.readStream.format("skype_stream").option("path", DIR).option("kind", "messages")``;
    option ``maxRecordsPerTrigger`` caps the records per micro-batch."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return EVENT_SCHEMA_DDL

    def streamReader(self, schema):
        max_records = self.options.get("maxRecordsPerTrigger")
        return StreamFilesReader(self.options["path"], self.options.get("kind", "messages"),
                                 int(max_records) if max_records else None)


def file_events(spark, path: str, kind: str, max_records: int | None = None):
    """A streaming DataFrame of stream events from a directory of stream files."""
    spark.dataSource.register(StreamFilesSource)
    reader = spark.readStream.format(SOURCE_NAME).option("path", os.path.abspath(path)).option("kind", kind)
    if max_records:
        reader = reader.option("maxRecordsPerTrigger", str(int(max_records)))
    return reader.load()


def kafka_events(spark, bootstrap: str, topic: str, kind: str, max_records: int | None = None,
                 starting_offsets: str = "earliest", *, dense: bool = False, dead_letters: str | None = None,
                 vocabulary: str | None = None, bounds: tuple | None = None):
    """A streaming DataFrame of stream events from a Kafka topic (values: stream records as JSON).

    Messages: ``seq`` = offset, one partition, dense offsets when ``dense`` (count windows);
    commands: ``cseq`` keyed by (topic partition, offset).  See :mod:`skype.dskype.ordering`."""
    if kind not in KINDS:
        raise InputError("E022", what="stream kind", value=kind, choices=", ".join(KINDS))
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", starting_offsets))
    if max_records:
        reader = reader.option("maxOffsetsPerTrigger", str(int(max_records)))
    return kafka_to_events(reader.load(), kind, dense=dense, dead_letters=dead_letters, vocabulary=vocabulary,
                           bounds=bounds)


def kafka_to_events(raw, kind: str, *, dense: bool = False, dead_letters: str | None = None,
                    vocabulary: str | None = None, bounds: tuple | None = None):
    """Kafka rows (``value`` binary, ``offset`` long, ``partition`` int if present) -> the
    stream-event schema, by :func:`kafka_arrow_to_events` on the executors
    (order checked: E082, E083; command keys: E084)."""
    from functools import partial

    cols = ["value", "offset"] + (["partition"] if "partition" in raw.columns else [])
    convert = partial(kafka_arrow_to_events, kind=kind, dense=dense, dead_letters=dead_letters,
                      vocabulary=vocabulary, bounds=bounds)
    return raw.select(*cols).mapInArrow(convert, EVENT_SCHEMA_DDL)


def kafka_sample(spark, bootstrap: str, topic: str, kind: str, limit: int, vocabulary: str | None = None,
                 bounds: tuple | None = None):
    """The first ``limit`` records of a topic as one stream-event Arrow table (a batch read from
    the earliest offsets): the sample the distribution is built from (not run against a broker
    in the tests; ``docs/spark.md``)."""
    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
           .orderBy("partition", "offset").limit(int(limit)))
    return kafka_to_events(raw, kind, vocabulary=vocabulary, bounds=bounds).toArrow()


def kafka_arrow_to_events(batches, kind: str, dense: bool = False, dead_letters: str | None = None,
                          vocabulary: str | None = None, bounds: tuple | None = None):
    """The ``mapInArrow`` function over Kafka rows (see :func:`skype.dskype.ordering.kafka_rows_to_events`)."""
    vocab = None
    if vocabulary is not None:
        from skype.model import Bounds
        from skype.dskype.vocabulary import shipped_vocabulary

        vocab = shipped_vocabulary(shipped_path(vocabulary))
        bounds = Bounds(*bounds)
    from skype.dskype.ordering import kafka_rows_to_events

    for batch in batches:
        events, dead = kafka_rows_to_events(batch, kind, dense=dense, vocab=vocab, bounds=bounds)
        if dead and dead_letters:
            from skype.dskype.routing import write_dead_letters

            write_dead_letters(dead_letters, [dict(d, kind="kafka-" + d["kind"]) for d in dead])
        yield events


def shipped_path(path: str) -> str:
    """Where this process finds a file shipped with ``SparkContext.addFile``: its ``SparkFiles``
    copy on an executor, else ``path`` itself (the run directory is shared)."""
    try:
        from pyspark import SparkFiles

        local = SparkFiles.get(os.path.basename(path))
        if os.path.exists(local):
            return local
    except Exception:  # not on a worker, or no SparkFiles root
        pass
    return path
