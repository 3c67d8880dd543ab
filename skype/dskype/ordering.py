"""One global message order and collision-free command keys for Kafka sources (no pyspark here).

**Messages: one partition, dense offsets.**  A message's ``seq`` is its Kafka offset, and the
messages topic must have exactly one partition: a count window of N means the last N messages
of *one* total order, and Structured Streaming reads several partitions at independent rates, so
no order across partitions exists to recover.  Every converted batch is checked: a record of any
other partition raises E082 (naming the partition and offset).  For a count window the offsets
must also be *dense* (every offset a message: no transaction markers, no compaction), else the
window would hold fewer than N messages: inside each batch the offsets of consecutive records
must differ by exactly 1 (E083 names the gap).  What a per-batch check cannot see is a gap
exactly between two micro-batches (the task does not know the previous batch's last offset):
the driver checks those after each batch, from the source's progress (:func:`check_offset_progress`:
a batch that read the offsets ``[start, end)`` of the messages topic must have read ``end -
start`` records, E083 otherwise).  That check comes after the batch, so the run stops one batch
late, with that batch's events written.  A producer of a count-window stream must write a plain
(non-transactional, non-compacted) topic.  Time windows only need the order, so gaps are allowed
there.

**Commands: keyed by (topic partition, offset).**  A command's ``cseq`` is
``partition << 40 | offset`` (E084 if the partition or the offset does not fit), distinct for
distinct records, so :meth:`skype.dskype.codec.Commands.concat` (which keeps one command per
``cseq``) never merges or drops commands of two partitions; offsets of one partition keep their
order.  Kafka gives no order across partitions: commands on one subscription id must go to one
partition (key the records by id), or carry ``at``, which places them in the message order.

Values are stream records as JSON: vectorised (``term_ids``/``weights``, :mod:`skype.dskype.staging`)
or, with a vocabulary, raw (``text`` or ``terms``, tokenized here as :mod:`skype.dskype.records` does).
"""

from __future__ import annotations

import json

import numpy as np

from skype.errors import InputError
from skype.dskype.records import (
    KIND_MESSAGE, KIND_RESULTS, KIND_SUBSCRIBE, KIND_UNSUBSCRIBE, dead_letter, events_batch, records_to_events,
)

PARTITION_BITS = 23
OFFSET_BITS = 40


def command_keys(partition: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """``partition << 40 | offset``: one key per (topic partition, offset), checked to fit."""
    partition, offset = np.asarray(partition, np.int64), np.asarray(offset, np.int64)
    bad = (partition < 0) | (partition >= 1 << PARTITION_BITS) | (offset < 0) | (offset >= 1 << OFFSET_BITS)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError("E084", partition=int(partition[i]), offset=int(offset[i]))
    return (partition << OFFSET_BITS) | offset


def message_sequence(partition: np.ndarray, offset: np.ndarray, dense: bool) -> np.ndarray:
    """The messages' ``seq`` (their offsets), checked: one partition; with ``dense``, no gap
    between consecutive records of the batch."""
    partition, offset = np.asarray(partition, np.int64), np.asarray(offset, np.int64)
    other = np.flatnonzero(partition != 0)
    if len(other):
        raise InputError("E082", partition=int(partition[other[0]]), offset=int(offset[other[0]]))
    if dense and len(offset) > 1:
        ordered = np.sort(offset)
        gaps = np.flatnonzero(np.diff(ordered) != 1)
        if len(gaps):
            g = int(gaps[0])
            raise InputError("E083", detail=f"offset {int(ordered[g])} is followed by {int(ordered[g + 1])}")
    return offset


def check_offset_progress(progress: dict, topic: str) -> None:
    """E083 when a micro-batch's progress shows fewer records of ``topic`` than its offset range:
    the offsets the batch covered, from ``startOffset`` to ``endOffset`` (exclusive), must all be
    records.  The first batch (no ``startOffset``) and other sources are not checked."""
    for source in progress.get("sources") or []:
        if f"[{topic}]" not in str(source.get("description", "")):
            continue
        start, end = _offsets(source.get("startOffset"), topic), _offsets(source.get("endOffset"), topic)
        if start is None or end is None:
            return
        span = sum(end[p] - start.get(p, end[p]) for p in end)
        rows = int(source.get("numInputRows", 0))
        if rows != span:
            ranges = ", ".join(f"partition {p}: [{start.get(p)}, {end[p]})" for p in sorted(end))
            raise InputError("E083", detail=f"batch {progress.get('batchId')} read {rows} records of topic "
                                            f"{topic!r} from offsets {ranges} ({span} offsets)")


def _offsets(value, topic: str) -> dict[str, int] | None:
    """A Kafka source offset (JSON ``{topic: {partition: offset}}``, as a string or parsed) as
    partition -> offset for ``topic``; None when absent."""
    if value is None:
        return None
    if isinstance(value, str):  # pyspark gives the JSON text ("null" or "None" before a first offset)
        try:
            value = json.loads(value)
        except ValueError:
            return None
    parts = value.get(topic) if isinstance(value, dict) else None
    return {str(p): int(o) for p, o in parts.items()} if parts else None


def _vectorised_row(rec: dict, kind: str, position: int) -> tuple:
    def num(name, cast):
        value = rec.get(name)
        return None if value is None else cast(value)

    terms = [int(t) for t in rec.get("term_ids") or []], [float(w) for w in rec.get("weights") or []]
    if kind == "messages":
        return (KIND_MESSAGE, position, None, num("id", int), num("x", float), num("y", float), num("t", float),
                None, None, *terms)
    op = rec.get("op")
    if op not in ("sub", "unsub", "results"):
        raise InputError("E086", op=op)
    kind_of = {"sub": KIND_SUBSCRIBE, "unsub": KIND_UNSUBSCRIBE, "results": KIND_RESULTS}
    return (kind_of[op], position, num("at", int), num("id", int),
            num("x", float), num("y", float), None, num("k", int), num("alpha", float), *terms,
            _spec(rec.get("spec")))


def _spec(value):
    """A command's range/knn/terms query (:mod:`skype.dskype.kinds`) as the JSON text it travels as."""
    return value if value is None or isinstance(value, str) else json.dumps(value)


def kafka_rows_to_events(batch, kind: str, *, dense: bool = False, vocab=None, bounds=None):
    """Kafka rows (``value`` bytes, ``offset``, optional ``partition``: 0 if absent) -> (a
    stream-event RecordBatch, dead letters).  Positions: see the module docstring; records whose
    value cannot be used are dead letters keeping their position."""
    n = batch.num_rows
    names = batch.schema.names
    offset = np.asarray(batch.column(names.index("offset")).to_numpy(zero_copy_only=False), np.int64)
    partition = (np.asarray(batch.column(names.index("partition")).to_numpy(zero_copy_only=False), np.int64)
                 if "partition" in names else np.zeros(n, np.int64))
    positions = (message_sequence(partition, offset, dense) if kind == "messages"
                 else command_keys(partition, offset))
    values = batch.column(names.index("value")).to_pylist()
    records = []
    for position, value in zip(positions.tolist(), values):
        try:
            records.append((position, json.loads(value)))
        except (TypeError, ValueError) as err:
            records.append((position, InputError("E010", detail=str(err))))
    # raw records (text or a terms object) are tokenized with the shipped vocabulary
    def is_raw(rec) -> bool:
        return isinstance(rec, dict) and "term_ids" not in rec and ("text" in rec or "terms" in rec)

    raw = [(p, r) for p, r in records if is_raw(r)]
    vectorised = [(p, r) for p, r in records if not is_raw(r)]
    raw_events, dead = (records_to_events(raw, kind, vocab, bounds) if vocab is not None and raw
                        else (None, [dead_letter(kind[:-1], p, r, InputError(
                            "E085", detail="a record without term_ids needs the run's --vocabulary")) for p, r in raw]))
    rows = []
    for position, rec in vectorised:
        try:
            if isinstance(rec, InputError):
                raise rec
            if not isinstance(rec, dict):
                raise InputError("E033", kind=kind[:-1], value=rec)
            rows.append(_vectorised_row(rec, kind, position))
        except (InputError, TypeError, ValueError) as err:
            err = err if isinstance(err, InputError) else InputError("E012", field="value", expected="a stream record",
                                                                      value=str(err))
            dead.append(dead_letter(kind[:-1], position, rec, err))
    events = events_batch(rows)
    if raw_events is not None and raw_events.num_rows:
        import pyarrow as pa

        events = pa.Table.from_batches([events, raw_events]).combine_chunks().to_batches()[0]
    return events, dead
