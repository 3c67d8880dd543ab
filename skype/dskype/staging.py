"""Stream files: the record format the streaming job reads, and writing a workload into it.

The job reads two directories of JSONL or Parquet files, processed in file-name order (producers
must write a file completely, e.g. under a temporary name, before giving it its final name).

* messages: ``{"id", "x", "y", "t", "term_ids": [int], "weights": [float]}``.  A message's global
  sequence number is its position in the directory (files in name order, then lines/rows).
* commands: ``{"op": "sub", "at", "id", "x", "y", "k", "alpha", "term_ids", "weights"}`` or
  ``{"op": "unsub", "at", "id"}`` (best with the record it removes: it then reaches only that
  record's partitions, without it every partition); ``{"op": "query", "at", "id", "spec"}`` (a
  snapshot query, :mod:`skype.dskype.snapshots`); ``at`` (optional) is the number of messages before the command,
  a command without ``at`` applies at the start of the micro-batch it arrives in.

Terms are already *vectorised* (ids of the run's :class:`~skype.text.Vocabulary` and unit
weights): every executor then scores with exactly the weights the centralized engine uses, and no
vocabulary has to be shared or grown across executors.  :func:`stage_inputs` writes a loaded
workload (:class:`skype.workload.Inputs`: generated, or files in the public formats) this way:
the initial subscriptions as commands at position 0, then every step of the stream.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import numpy as np

from skype.errors import InputError
from skype.model import MessageBatch, SubscriptionBatch

FORMATS = ("parquet", "jsonl")
MESSAGE_FIELDS = ("id", "x", "y", "t", "term_ids", "weights")
COMMAND_FIELDS = ("op", "at", "id", "x", "y", "k", "alpha", "term_ids", "weights")


def message_table(batch: MessageBatch):
    import pyarrow as pa

    t = batch.terms
    return pa.table({
        "id": pa.array(batch.ids), "x": pa.array(batch.x), "y": pa.array(batch.y), "t": pa.array(batch.t),
        "term_ids": pa.ListArray.from_arrays(pa.array(t.indptr.astype(np.int32)), pa.array(t.ids)),
        "weights": pa.ListArray.from_arrays(pa.array(t.indptr.astype(np.int32)), pa.array(t.weights)),
    })


def command_table(op: list[str], at: list[int | None], subs: SubscriptionBatch, spec: list[str | None] | None = None):
    import pyarrow as pa

    t = subs.terms
    extra = {"spec": pa.array(spec, pa.string())} if spec is not None else {}  # query kinds: skype.dskype.kinds
    return pa.table({
        "op": pa.array(op, pa.string()), "at": pa.array(at, pa.int64()), "id": pa.array(subs.ids),
        "x": pa.array(subs.x), "y": pa.array(subs.y), "k": pa.array(subs.k), "alpha": pa.array(subs.alpha),
        "term_ids": pa.ListArray.from_arrays(pa.array(t.indptr.astype(np.int32)), pa.array(t.ids)),
        "weights": pa.ListArray.from_arrays(pa.array(t.indptr.astype(np.int32)), pa.array(t.weights)), **extra,
    })


def write_table(table, path: Path, fmt: str, drop_nulls: bool = True) -> None:
    """Write atomically (a temporary name unique to the attempt, then rename) as Parquet or JSONL.

    JSONL rows leave out null fields unless ``drop_nulls`` is false."""
    if fmt not in FORMATS:
        raise InputError("E022", what="stream file format", value=fmt, choices=", ".join(FORMATS))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}.tmp")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, tmp)
    else:
        with open(tmp, "w", encoding="utf-8") as fh:
            for row in table.to_pylist():
                if drop_nulls:
                    row = {k: v for k, v in row.items() if v is not None}
                fh.write(json.dumps(row, allow_nan=False))
                fh.write("\n")
    os.replace(tmp, path)


def suffix(fmt: str) -> str:
    """The file suffix of an output format (events, results): ``json`` -> ``jsonl``, else parquet."""
    return "jsonl" if fmt == "json" else "parquet"


def file_name(index: int, fmt: str) -> str:
    return f"part-{index:08d}.{'parquet' if fmt == 'parquet' else 'jsonl'}"


def stage_inputs(inputs, messages_dir: str | Path, commands_dir: str | Path, *, fmt: str = "parquet",
                 file_records: int = 10_000) -> dict:
    """Write a workload as stream files; returns counts.

    Messages go to files of ``file_records`` messages (name order = stream order); commands to
    files of ``file_records`` commands: the initial subscriptions at position 0, then each step's
    commands at the number of messages before it.  An unsubscribe carries the record it removes.
    """
    from skype.partitioning.registry import empty_subscriptions

    if file_records < 1:
        raise InputError("E023", what="file_records", expected="an integer >= 1", value=file_records)
    from skype.dskype.kinds import VOCABULARY_FILE, lower_inputs, spec_column, write_vocabulary  # range/knn/terms and until (its module docstring)

    lowered = lower_inputs(inputs)
    inputs = lowered.inputs
    if "terms" in lowered.kinds.values() or any(q["kind"] == "terms" for q in lowered.asked):
        write_vocabulary(Path(commands_dir).parent / VOCABULARY_FILE, inputs.vocabulary)
    messages_dir, commands_dir = Path(messages_dir), Path(commands_dir)
    op: list[str] = ["sub"] * len(inputs.subscriptions)
    at: list[int | None] = [0] * len(inputs.subscriptions)
    parts = [inputs.subscriptions]
    # id -> (part, row) of its live record: an unsubscribe carries the record it removes (the
    # router derives its placement from it), and a re-subscription of a live id is preceded by
    # such an unsubscribe, so that every command reaches only the partitions it acts on
    live: dict[int, tuple[int, int]] = {int(s): (0, i) for i, s in enumerate(inputs.subscriptions.ids.tolist())}
    position = 0
    asked = 0  # snapshot queries so far
    pending: list[MessageBatch] = []

    def unsubscribe(sub_id: int) -> None:
        op.append("unsub")
        at.append(position)
        where = live.pop(sub_id, None)
        parts.append(parts[where[0]].slice(where[1], where[1] + 1) if where else _id_only(sub_id))

    for kind, payload in inputs.steps:
        if kind == "msgs":
            pending.append(payload)
            position += len(payload)
        elif kind == "sub":
            for sub_id in payload.ids.tolist():
                if int(sub_id) in live:
                    unsubscribe(int(sub_id))
            op += ["sub"] * len(payload)
            at += [position] * len(payload)
            parts.append(payload)
            live.update({int(s): (len(parts) - 1, i) for i, s in enumerate(payload.ids.tolist())})
        elif kind == "query":  # a snapshot query: id = its ordinal, spec = the compiled query (skype.dskype.snapshots)
            op.append("query")
            at.append(position)
            parts.append(_id_only(asked))
            lowered.specs[id(parts[-1])] = payload
            asked += 1
        else:
            unsubscribe(int(payload))
    messages = MessageBatch.concat(pending) if pending else None
    count = 0
    if messages is not None:
        for index, start in enumerate(range(0, len(messages), file_records)):
            chunk = messages.slice(start, start + file_records)
            write_table(message_table(chunk), messages_dir / file_name(index, fmt), fmt)
            count += len(chunk)
    messages_dir.mkdir(parents=True, exist_ok=True)
    subs = _concat([p for p in parts if len(p)]) if any(len(p) for p in parts) else empty_subscriptions()
    if len(op):
        # several files, so that several tasks route the commands of one micro-batch in parallel
        table = command_table(op, at, subs, spec_column(lowered, parts) if lowered.specs else None)
        for index, start in enumerate(range(0, len(op), file_records)):
            write_table(table.slice(start, file_records), commands_dir / file_name(index, fmt), fmt)
    commands_dir.mkdir(parents=True, exist_ok=True)
    return {"messages": count, "commands": len(op)}


def _id_only(sub_id: int) -> SubscriptionBatch:
    from skype.model import TermMatrix

    z = np.zeros(1)
    return SubscriptionBatch(np.array([sub_id], np.int64), z, z, np.zeros(1, np.int64), z, TermMatrix(np.zeros(2, np.int64), np.zeros(0, np.int64), np.zeros(0)))


def _concat(parts: list[SubscriptionBatch]) -> SubscriptionBatch:
    from skype.partitioning.registry import concat_subscriptions

    return concat_subscriptions(parts)
