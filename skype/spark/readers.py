"""Readers of a DSkype stream directory, by position: staged stream files, or raw files tokenized by the tasks.

A stream directory holds files read in name order; a reader's offset counts the records
consumed, so a record's *position* is stable across restarts (:mod:`skype.spark.sources` plans
batches over two such readers, :mod:`skype.spark.backfill` reads positions back).

* :class:`StreamFilesReader`: staged stream files (:mod:`skype.dskype.staging`), JSONL or
  Parquet, already in the stream-event schema once read (:func:`to_events`).
* :class:`RawFilesReader` (:mod:`skype.spark.ingest`): raw records, split into input partitions of
  at most ``split`` records that the reading tasks parse, validate and tokenize with the shipped
  vocabulary (:func:`read_raw_piece`); JSONL files keep one byte offset per ``split`` records
  (:func:`jsonl_marks`) so that a task seeks near its first record.

New files may be added while a query runs; they must sort after the files already seen (checked)
and appear complete (written under a hidden name and renamed).  This module imports neither the
sources nor the ingestion planning: both import it.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from skype.errors import InputError
from skype.dskype.records import parse_lines, records_to_events
from skype.dskype.routing import (KIND_MESSAGE, KIND_QUERY, KIND_RESULTS, KIND_SUBSCRIBE, KIND_UNSUBSCRIBE,
                                 event_arrow_schema)
from skype.dskype.screening import write_dead_letters

DEFAULT_SPLIT = 10_000
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


_last_table: dict[str, Any] = {}  # per worker: the last file read (consecutive batches share files)


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


# --------------------------------------------------------------------------- both streams, one source


@dataclass(frozen=True)
class RawPiece:
    path: str
    skip: int
    take: int
    first_position: int
    seek: int = 0  # byte offset of record ``seek_record`` (JSONL): the scan starts there
    seek_record: int = 0


def jsonl_marks(path: str, every: int) -> list[int]:
    """Byte offsets of records 0, every, 2 * every, ... of a JSONL file (blank lines hold no
    record), so that a task reading from record r scans at most ``every`` lines to reach it."""
    marks, record, offset = [], 0, 0
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                if record % every == 0:
                    marks.append(offset)
                record += 1
            offset += len(line)
    return marks


def read_raw_piece(piece: RawPiece, kind: str, vocab, bounds, default_at: int | None):
    """Parse, validate and vectorise records ``[skip, skip + take)`` of one raw file."""
    fmt = _file_format(piece.path)
    if fmt == "jsonl":
        with open(piece.path, "rb") as fh:
            fh.seek(piece.seek)
            nonblank = (line for line in fh if line.strip())
            skip = piece.skip - piece.seek_record
            lines = list(itertools.islice(nonblank, skip, skip + piece.take))
        records = parse_lines(lines, piece.first_position)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(piece.path).slice(piece.skip, piece.take).to_pylist()
        records = ((piece.first_position + i, {k: v for k, v in row.items() if v is not None})
                   for i, row in enumerate(rows))
    else:
        raise InputError("E024", path=piece.path)
    return records_to_events(records, kind, vocab, bounds, default_at)


class RawFilesReader(StreamFilesReader):
    """Offsets as :class:`StreamFilesReader`; each batch split into pieces of ``split`` records,
    tokenized by the tasks that read them.  For JSONL files the reader keeps one byte offset per
    ``split`` records (:func:`jsonl_marks`; a few integers per file), so a task seeks near its
    first record instead of scanning the file from the start."""

    def __init__(self, path: str, kind: str, max_records: int | None, *, vocabulary: str, claims: str | None,
                 bounds: tuple, dead_letters: str | None, split: int, default_at: int | None) -> None:
        super().__init__(path, kind, max_records)
        self.vocabulary, self.claims, self.bounds = vocabulary, claims, tuple(bounds)
        self.dead_letters, self.split, self.default_at = dead_letters, max(1, int(split)), default_at
        self.marks: dict[str, list[int]] = {}

    def _refresh(self) -> int:
        total = super()._refresh()
        for name, _ in self.files:
            if name not in self.marks and _file_format(name) == "jsonl":
                self.marks[name] = jsonl_marks(os.path.join(self.path, name), self.split)
        return total

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        pieces = []
        for part in super().partitions(start, end):
            p = part.value
            marks = self.marks.get(os.path.basename(p.path))
            for lo in range(0, p.take, self.split):
                take = min(self.split, p.take - lo)
                skip = p.skip + lo
                mark = min(skip // self.split, len(marks) - 1) if marks else 0
                seek = marks[mark] if marks else 0
                pieces.append(InputPartition(RawPiece(p.path, skip, take, p.first_position + lo, seek,
                                                      mark * self.split if marks else 0)))
        return pieces

    def read(self, partition: InputPartition):
        from skype.model import Bounds
        from skype.dskype.vocabulary import shipped_vocabulary

        vocab = shipped_vocabulary(shipped_path(self.vocabulary), self.claims)
        batch, dead = read_raw_piece(partition.value, self.kind, vocab, Bounds(*self.bounds), self.default_at)
        if dead and self.dead_letters:
            write_dead_letters(self.dead_letters, [dict(d, kind="ingest-" + d["kind"]) for d in dead])
        yield batch


def raw_reader(options, path: str, kind: str, max_records: int | None = None) -> RawFilesReader:
    """A :class:`RawFilesReader` from a source's options (``vocabulary``, ``bounds`` as
    ``minx,miny,maxx,maxy``, ``claims``, ``deadLetters``, ``split``, ``defaultAt``)."""
    default_at = options.get("defaultAt")
    return RawFilesReader(path, kind, max_records, vocabulary=options["vocabulary"], claims=options.get("claims"),
                          bounds=tuple(float(v) for v in options["bounds"].split(",")),
                          dead_letters=options.get("deadLetters"), split=int(options.get("split", DEFAULT_SPLIT)),
                          default_at=int(default_at) if default_at not in (None, "") else None)


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
