"""Streaming sources of messages and subscription commands, all yielding the stream-event schema.

**Files (default): the ``skype_stream`` Python data source** (:class:`PairedStreamReader`).  Two
directories of stream files (:mod:`skype.dskype.staging`), messages and commands, each read in
file-name order, as one source whose offset ``{"messages": m, "commands": c}`` counts the records
consumed of each, so a record's *position* is stable across restarts: for messages it is the
global sequence number ``seq``, for commands their ordinal ``cseq``.  One offset decides what a
micro-batch holds of both streams (:func:`plan_batch`): at most ``--batch-size`` messages and
``--commands-per-batch`` commands, and every command due before its messages, so the memory of a
batch is bounded by the batch, not by the stream's commands, and the results stay exact.  With
``trigger(availableNow=True)`` the source fixes its end at the start and still honours the caps,
so the batches are exactly those of a live run; a replayed batch reads the offsets its first
attempt logged.  New files may be added while the query runs; they must sort after the files
already seen (checked) and appear complete (written under a hidden name and renamed).

**Routing as it reads** (option ``routing``).  The reading task routes its piece itself
(:func:`skype.dskype.routing.route_arrow`, with the routers from a file of the run directory), so
the batch's first stage runs one Python evaluation, not a source and a ``mapInArrow`` after it;
the rows are then the routed rows, exactly those the ``mapInArrow`` would make of the same piece.

**Table versions in the offset.**  With adaptive pipelines (option ``tables``: pipeline ->
its rebalance directory) the offset also records, per pipeline, the newest ownership-table
version written when the batch was planned (``"tables"``, probed by name:
:func:`skype.dskype.handover.newest_version`), and every input piece of the batch carries it as
a control event (:func:`skype.dskype.routing.tables_events`), together with the start offset's
version: the one in force during the batch (a version is announced by the first batch whose
offset records it and comes into force at the start of the next, :mod:`skype.dskype.handover`).
Spark logs the offsets before the batch runs, so a replayed batch uses exactly its first
attempt's versions; an offset whose records do not advance keeps its versions too (no batch of
versions alone).

**Kafka (optional): :func:`kafka_events`.**  Each record's value is one stream-file record as
JSON.  A message's ``seq`` is its Kafka offset, so the messages topic must have one partition (a
total order); commands' ``cseq`` is their offset likewise.  Needs Spark's Kafka connector on the
classpath (``--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow

from skype.errors import InputError
from skype.dskype.routing import (EVENT_SCHEMA_DDL, ROUTED_SCHEMA_DDL, tables_events)
from skype.spark.readers import (KINDS, StreamFilesReader, _file_format, count_records,  # noqa: F401  (re-exported)
                                 raw_reader, shipped_path)

SOURCE_NAME = "skype_stream"


def command_positions(path: str) -> np.ndarray:
    """The position ``at`` of every command of a stream file (staged or raw), ``-1`` where a
    record has none or an unreadable one (the record is refused later, by the reading task)."""
    if _file_format(path) == "parquet":
        import pyarrow.parquet as pq

        if "at" not in pq.ParquetFile(path).schema_arrow.names:
            return np.full(count_records(path), -1, np.int64)
        column = pq.read_table(path, columns=["at"]).column("at").to_pylist()
        return np.array([_position(v) for v in column], np.int64)
    import json

    out = []
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                try:
                    record = json.loads(line)
                    out.append(_position(record.get("at") if isinstance(record, dict) else None))
                except ValueError:
                    out.append(-1)
    return np.array(out, np.int64)


def _position(value) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else -1


def plan_batch(start: tuple[int, int], available: tuple[int, int], due_by: np.ndarray,
               max_messages: int | None, max_commands: int | None) -> tuple[int, int]:
    """The end offsets ``(messages, commands)`` of the next micro-batch.

    ``due_by[i]`` is the suffix minimum of the commands' positions from command ``i`` on (a
    command without a position counts as due at once), so ``#{i : due_by[i] <= m}`` commands must
    be delivered before the messages ``[0, m)`` are processed (a batch ending after message
    ``h`` applies the commands positioned at ``h + 1`` or earlier).  The batch takes at most
    ``max_messages`` messages and ``max_commands`` commands, and stops its messages before the
    first message whose commands the cap leaves out; when even the commands due now exceed the
    cap, the batch holds commands only.  Without ``max_commands`` every available command comes
    (the source then holds no more than the stream's files).

    >>> due = np.minimum.accumulate(np.array([0, 0, 0, 0, 5, 5, 9])[::-1])[::-1]
    >>> plan_batch((0, 0), (20, 7), due, 10, 3)  # 4 commands due at 0: commands only
    (0, 3)
    >>> plan_batch((0, 3), (20, 7), due, 10, 3)  # messages until the command the cap leaves out
    (8, 6)
    >>> plan_batch((8, 6), (20, 7), due, 10, 3)
    (18, 7)
    >>> plan_batch((0, 0), (20, 7), due, 10, None)
    (10, 7)
    """
    m0, c0 = start
    total_m, total_c = available
    m1 = min(total_m, m0 + max_messages) if max_messages else total_m
    if not max_commands:
        return max(m0, m1), max(c0, total_c)
    c_lim = min(total_c, c0 + int(max_commands))
    if c_lim < total_c:
        first_left_out = int(due_by[c_lim])  # the earliest position a command beyond the cap is due
        if first_left_out - 1 < m0 or (first_left_out - 1 == m0 and m1 > m0):
            return m0, c_lim  # the commands due before the next message fill the batch
        m1 = min(m1, first_left_out - 1)
    need = int(np.searchsorted(due_by[:total_c], m1, side="right"))
    return max(m0, m1), max(c0, need)


@dataclass(frozen=True)
class LanePiece:
    lane: str  # "messages" or "commands"
    piece: object
    tables: tuple = ()  # (pipeline, version in force, newest version) of the batch: control events first


def newest_tables(dirs: dict[int, str], known: dict) -> dict[str, int]:
    """Pipeline (as a JSON key) -> the newest table version written in its directory, probed
    by name from the version ``known`` (the start offset's) on."""
    from skype.dskype.handover import newest_version

    return {str(p): newest_version(d, int(known.get(str(p), 0))) for p, d in sorted(dirs.items())}


class PairedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Both streams as one source, offsets ``{"messages": m, "commands": c}``, so that one
    offset decides what a batch holds of each (:func:`plan_batch`): a batch takes at most
    ``max_messages`` messages and ``max_commands`` commands and every command due before its
    messages.  A replayed batch reads the offsets logged by its first attempt, hence the same
    records.  The driver keeps each command's position (8 bytes a command) to plan the batches."""

    def __init__(self, messages: StreamFilesReader, commands: StreamFilesReader,
                 max_messages: int | None, max_commands: int | None, tables: dict[int, str] | None = None,
                 routing: dict | None = None) -> None:
        self.lanes = {"messages": messages, "commands": commands}
        self.routing = routing  # route as it reads: {"routers": file, "bounds", "dead_letters"} (module docstring)
        self.tables = dict(tables or {})  # adaptive pipeline -> its rebalance directory (module docstring)
        self.max_messages, self.max_commands = max_messages, max_commands
        self.positions: list[np.ndarray] = []  # per command file, in name order
        self.due_by = np.zeros(0, np.int64)
        self.target: tuple[int, int] | None = None

    def _refresh(self) -> tuple[int, int]:
        total_m = self.lanes["messages"]._refresh()
        commands = self.lanes["commands"]
        total_c = commands._refresh()
        if self.max_commands and len(self.positions) < len(commands.files):
            for name, _ in commands.files[len(self.positions):]:
                self.positions.append(command_positions(os.path.join(commands.path, name)))
            pos = np.concatenate(self.positions) if self.positions else np.zeros(0, np.int64)
            pos = np.where(pos < 0, 0, pos)  # no position: due at once
            self.due_by = np.minimum.accumulate(pos[::-1])[::-1] if len(pos) else pos
        return total_m, total_c

    def __getstate__(self) -> dict:
        """What a reading task is sent: not the commands' positions (planning is the driver's)."""
        return dict(self.__dict__, positions=[], due_by=np.zeros(0, np.int64))

    def initialOffset(self) -> dict:
        return {"messages": 0, "commands": 0, **({"tables": newest_tables(self.tables, {})} if self.tables else {})}

    def getDefaultReadLimit(self):
        return ReadAllAvailable()  # the caps are this reader's own (plan_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._refresh()

    def latestOffset(self, start: dict, limit) -> dict:
        total_m, total_c = self._refresh()
        if self.target is not None:
            total_m, total_c = min(total_m, self.target[0]), min(total_c, self.target[1])
        begin = (int(start["messages"]), int(start["commands"])) if start else (0, 0)
        m1, c1 = plan_batch(begin, (total_m, total_c), self.due_by, self.max_messages, self.max_commands)
        if not self.tables:
            return {"messages": m1, "commands": c1}
        known = dict(start.get("tables", {})) if start else {}
        if start and (m1, c1) == begin:  # nothing to read: the offset stands, versions included
            return {"messages": m1, "commands": c1, "tables": known or newest_tables(self.tables, {})}
        return {"messages": m1, "commands": c1, "tables": newest_tables(self.tables, known)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        pieces = []
        logged = end.get("tables")
        if logged is None and self.tables:
            # an offset logged before versions were recorded (an older run directory): the newest
            # versions, as that run used them; a version decided after this batch has an
            # effective position beyond its messages, so the batch does not apply it
            logged = newest_tables(self.tables, {})
        # the version in force at the batch's start is the one the previous batch announced
        # (its offset, ``start``); the batch announces ``end``'s (skype.dskype.handover)
        before = (start or {}).get("tables") or logged or {}
        tables = tuple(sorted((int(p), int(before.get(p, v)), int(v)) for p, v in (logged or {}).items()))
        for lane, reader in self.lanes.items():
            lo, hi = (int(start[lane]) if start else 0), int(end[lane])
            if lo < hi:
                pieces += [InputPartition(LanePiece(lane, p.value, tables))
                           for p in reader.partitions({"records": lo}, {"records": hi})]
        return pieces

    def read(self, partition: InputPartition):
        events = self._events(partition.value)
        if self.routing is None:
            yield from events
            return
        from skype.dskype.routing import route_arrow, routers_from_file

        bounds = self.routing.get("bounds")
        yield from route_arrow(routers_from_file(self.routing["routers"]), events,
                               bounds=tuple(bounds) if bounds else None, dead_letters=self.routing.get("dead_letters"))

    def _events(self, piece: LanePiece):
        if piece.tables:  # every piece: each routed Arrow batch then stamps every partition
            yield tables_events({p: (u, v) for p, u, v in piece.tables})
        yield from self.lanes[piece.lane].read(InputPartition(piece.piece))

    def commit(self, end: dict) -> None:
        pass


class PairedStreamSource(DataSource):
    """``spark.readStream.format("skype_stream")`` with options ``messages`` and ``commands``
    (stream directories), ``maxRecordsPerTrigger`` (messages) and ``maxCommandsPerTrigger``; the
    raw-ingestion options of :class:`skype.spark.ingest.RawFilesSource` when ``vocabulary`` is set."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return ROUTED_SCHEMA_DDL if self.options.get("routing") else EVENT_SCHEMA_DDL

    def streamReader(self, schema):
        o = self.options
        if o.get("vocabulary"):
            lanes = [raw_reader(o, o[kind], kind) for kind in KINDS]
        else:
            lanes = [StreamFilesReader(o[kind], kind, None) for kind in KINDS]
        tables = {int(p): d for p, d in json.loads(o["tables"]).items()} if o.get("tables") else None
        routing = json.loads(o["routing"]) if o.get("routing") else None
        return PairedStreamReader(lanes[0], lanes[1], _positive(o.get("maxRecordsPerTrigger")),
                                  _positive(o.get("maxCommandsPerTrigger")), tables, routing)


def _positive(value) -> int | None:
    return int(value) if value not in (None, "", "0") else None


def paired_events(spark, messages: str, commands: str, max_messages: int | None, max_commands: int | None,
                  tables: dict[int, str] | None = None, routing: dict | None = None, **raw_options):
    """A streaming DataFrame of both streams' events, batches cut by :func:`plan_batch`;
    ``tables``: adaptive pipeline -> its rebalance directory (versions in the offsets);
    ``routing``: route as the source reads (``{"routers": file, "bounds", "dead_letters"}``, see
    :func:`skype.dskype.routing.write_routers_file`): the frame has the routed rows' schema;
    ``raw_options`` (``vocabulary``, ``bounds``, ...) make the executors read raw files."""
    spark.dataSource.register(PairedStreamSource)
    reader = (spark.readStream.format(SOURCE_NAME).option("messages", os.path.abspath(messages))
              .option("commands", os.path.abspath(commands)))
    if routing:
        reader = reader.option("routing", json.dumps(routing))
    if tables:
        reader = reader.option("tables", json.dumps({str(p): os.path.abspath(d) for p, d in tables.items()}))
    options = {"maxRecordsPerTrigger": max_messages, "maxCommandsPerTrigger": max_commands, **raw_options}
    for name, value in options.items():
        if value is not None:
            reader = reader.option(name, str(value))
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
    vocab, space = None, None
    if vocabulary is not None:
        from skype.model import Bounds
        from skype.dskype.vocabulary import shipped_vocabulary

        vocab = shipped_vocabulary(shipped_path(vocabulary))
        space = Bounds(*bounds) if bounds is not None else None
    from skype.dskype.ordering import kafka_rows_to_events

    for batch in batches:
        events, dead = kafka_rows_to_events(batch, kind, dense=dense, vocab=vocab, bounds=space)
        if dead and dead_letters:
            from skype.dskype.screening import write_dead_letters

            write_dead_letters(dead_letters, [dict(d, kind="kafka-" + d["kind"]) for d in dead])
        yield events
