"""The two stateful operators (``transformWithState``, Row API) of the DSkype streaming job.

1. :class:`PartitionProcessor`, grouped by subscription partition: merges the batch's routed rows
   (messages, commands, ticks), hands them with the committed ``(version, tag)`` to the
   partition's engine host, rebuilds the engine from durable state on a miss, writes the batch's
   durable delta (:mod:`skype.dskype.durable`) and emits the partition's reports, one row per merge
   bucket, plus one metrics row.  With ``inline_merge`` (methods that place every subscription on
   one partition: hashing, location) the reports are already final and it emits the events itself:
   that method needs no merge stage.
2. :class:`MergeProcessor`, grouped by merge bucket: folds the reports into the bucket's state
   (replica lists of replicated subscriptions), emits the batch's result-change events, passes the
   partitions' metrics rows (and the events of inline pipelines, when a run mixes methods) through
   and adds its own.

Each batch bumps ``version`` and draws a fresh random ``tag`` for the key; the host applies a
batch only when its object carries the committed stamp (see :mod:`skype.spark.hosts`).  Every
``(version, tag)`` a host can hold was either committed, or written by a task whose state-store
commit never happened, in which case no committed state carries it and the next task rebuilds.

Rows in: :data:`skype.dskype.routing.ROUTED_SCHEMA_DDL`.  Rows between the stages:
``key, pipeline, kind, payload`` (kind ``reports``, ``metrics``, or ``events`` without a merge
stage; in the stream's last batch also ``results`` and a ``results-request`` to every merge
bucket; ``answers`` of snapshot queries).  Rows out: ``pipeline, kind, payload`` (kind ``events``,
``metrics``, ``results`` or ``answers``).  With the files sink (``files``) a task writes its
``events``, ``results`` and ``answers`` rows itself (:func:`skype.spark.sink.write_task_files`, one
file per grouping key) and emits a ``written`` row in their place: the batch's event blobs never
leave the task that made them, and the sink needs no Python stage.

**Final results from the state.**  When the stream's length is known (``final_upto``: the job
staged it), the batch whose high-water mark reaches its end is the last: each partition then
sends the top-k of its single-replica subscriptions and each merge bucket, after folding that
batch's reports, the merged top-k of its replicated ones.  An open stream (a directory, Kafka)
gets the same answers in the batch where a producer's results request (``{"op": "results",
"at"}`` in the commands) falls due.  Every live subscription is answered exactly once, and the
sink's tasks write the answers as the results file's lines.  ``pipeline``
numbers the run's methods: a run may evaluate several methods side by side over one stream, each
with its own keys, state and events.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from abc import abstractmethod
from typing import Iterator

import numpy as np
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from skype.dskype import codec
from skype.dskype.codec import Commands
from skype.dskype.durable import (Meta, command_log_entry, commit_partition_log, commit_segments, join_pieces,
                                 log_entry_count, wants_snapshot, write_log)
from skype.spark.hosts import MERGE, PARTITION, HostError, InProcessHosts, ProcessHosts
from skype.dskype.merge import MergeCore
from skype.dskype.partition import PartitionConfig, PartitionInput
from skype.spark.sink import TaskFiles, streaming_batch_id, write_task_files

STAGE_SCHEMA_DDL = "key long, pipeline int, kind string, payload binary"
RESULTS_REQUEST = "results-request"  # partition -> merge bucket: the stream ended, send the final top-k
OUTPUT_SCHEMA_DDL = "pipeline int, kind string, payload binary"
BLOB = "blob binary"
ID = "id long"
FILE_KINDS = ("events", "results", "answers")  # rows a task writes itself with the files sink


def _new_tag() -> int:
    return secrets.randbits(62) + 1


def _task_partition() -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return int(ctx.partitionId()) if ctx is not None else -1
    except Exception:  # noqa: BLE001 - metrics only
        return -1


class _MapStore:
    """A ``MapState`` of blobs by id as :class:`skype.dskype.durable.BlobStore`."""

    def __init__(self, state) -> None:
        self.state = state

    def put(self, key: int, blob: bytes) -> None:
        self.state.updateValue((key,), (blob,))

    def remove(self, key: int) -> None:
        self.state.removeKey((key,))


class _HostedProcessor(StatefulProcessor):
    """Shared plumbing: the host client, the meta/log state, the apply-or-rebuild exchange."""

    stage = ""

    def __init__(self, token: str, engine_cache: str = "process", idle_timeout: float = 600.0,
                 slots: int | None = None, files: TaskFiles | None = None) -> None:
        self.token = token
        self.engine_cache = engine_cache
        self.idle_timeout = idle_timeout
        self.slots = slots  # engine hosts per executor: its cores (set by the driver)
        self.files = files  # the files sink: this task writes its events, results and answers

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        key = int(key[0])
        out = self._handle(key, rows)
        if self.files is None:  # console or Kafka sink, or a test driving the processor: rows out
            yield from out
            return
        held: list[Row] = []
        passed: list[Row] = []
        for row in out:
            (held if row.kind in FILE_KINDS else passed).append(row)
        if held:
            label = f"{self.stage[0]}{key:05d}"  # partition and bucket keys are numbered apart
            written = write_task_files(self.files, streaming_batch_id(), label,
                                       [(r.pipeline, r.kind, bytes(r.payload)) for r in held])
            for pipeline, kind, payload in written:
                yield Row(**{**held[0].asDict(), "pipeline": pipeline, "kind": kind, "payload": payload})
        yield from passed

    @abstractmethod
    def _handle(self, key: int, rows) -> Iterator[Row]:
        """The stage's own work on one grouping key's rows: its output rows."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.meta_state = handle.getValueState("meta", BLOB)
        self.log_state = handle.getMapState("log", ID, BLOB)
        self._hosts = (ProcessHosts(self.token, self.idle_timeout, slots=self.slots) if self.engine_cache == "process"
                       else InProcessHosts())

    def close(self) -> None:
        pass

    def _load_meta(self) -> Meta:
        value = self.meta_state.get()
        return Meta.from_blob(value[0] if value is not None else None)

    def _read_log(self, meta: Meta) -> list[bytes]:
        entries = {int(k[0]): bytes(v[0]) for k, v in self.log_state.iterator()} if meta.log_ids else {}
        return join_pieces(meta.log_ids, entries)

    def _exchange(self, key: int, ident: tuple, meta: Meta, new: tuple, inputs, want_snapshot: bool,
                  durable_fn) -> tuple:
        """Apply on the host; on a miss send the durable state.  Returns (output, snapshot, info)."""
        reply = self._hosts.call(self.stage, key, ("apply", self.stage, key, ident, meta.committed, new, inputs,
                                                   want_snapshot))
        cold = False
        if reply[0] == "miss":
            cold = bool(reply[1])
            reply = self._hosts.call(self.stage, key, ("rebuild", self.stage, key, ident, durable_fn(), new, inputs,
                                                       want_snapshot))
        if reply[0] != "ok":
            raise HostError(f"unexpected host reply {reply[0]!r}")
        _, output, snapshot, info = reply
        info = dict(info, hit=not info["rebuilt"], cold=cold and meta.version == 0)
        return output, snapshot, info

    def _write_log(self, meta: Meta, delta: bytes | None, snapshot: bytes | None) -> int:
        """:func:`skype.dskype.durable.write_log` into this key's ``log`` state."""
        return write_log(meta, _MapStore(self.log_state), delta, snapshot)


# A batch's events leave a task as rows of at most about this many bytes: a partition's events as
# one value (every one of 490,000 subscriptions getting its first top-k) ran a 1 GB driver out of
# heap in the row writer at 1M subscriptions (docs/results-spark.md).  The sink concatenates the
# pieces in order, so its files are the same.
EVENT_PIECE_BYTES = 16 << 20


def split_events(blob: bytes, size: int | None = None) -> list[bytes]:
    """An events blob (:class:`skype.dskype.reports.EventRows`) as blobs of consecutive rows of
    at most about ``size`` bytes each (one, unless it is larger), same columns, same ``upto``."""
    size = size or EVENT_PIECE_BYTES
    if len(blob) <= size:
        return [blob]
    c = codec.unpack(blob)
    n = len(c["sub"])
    pieces = min(n, -(-len(blob) // size)) if n else 1
    bounds = np.linspace(0, n, pieces + 1).astype(np.int64)
    out = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        e0, e1, l0, l1 = int(c["e_ptr"][a]), int(c["e_ptr"][b]), int(c["l_ptr"][a]), int(c["l_ptr"][b])
        out.append(codec.pack(upto=c["upto"], sub=c["sub"][a:b], created=c["created"][a:b], removed=c["removed"][a:b],
                              e_ptr=c["e_ptr"][a:b + 1] - e0, e_id=c["e_id"][e0:e1], e_score=c["e_score"][e0:e1],
                              e_seq=c["e_seq"][e0:e1], l_ptr=c["l_ptr"][a:b + 1] - l0, l_id=c["l_id"][l0:l1]))
    return out


class PartitionProcessor(_HostedProcessor):
    """Stage 1: one subscription partition per grouping key (see module docstring)."""

    stage = PARTITION

    def __init__(self, token: str, configs: dict[int, PartitionConfig], engine_cache: str = "process",
                 idle_timeout: float = 600.0, slots: int | None = None, files: TaskFiles | None = None) -> None:
        super().__init__(token, engine_cache, idle_timeout, slots, files)
        self.configs = configs

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.segment_state = handle.getMapState("segments", ID, BLOB)

    def _handle(self, key: int, rows) -> Iterator[Row]:
        t0 = time.perf_counter()
        config = self.configs[key]
        spec = config.window
        msg_parts, cmd_parts, stamps = [], [], set()
        hwm_seq, hwm_t = -1, -math.inf
        for row in rows:
            if row.summary:  # the keyword-summary version the router used (skype.dskype.summaries)
                stamps.add(row.summary)
            if row.messages:
                msg_parts.append(codec.unpack_messages(row.messages))
            if row.commands:
                cmd_parts.append(Commands.unpack(row.commands))
            hwm_seq = max(hwm_seq, int(row.hwm_seq))
            hwm_t = max(hwm_t, float(row.hwm_t))
        messages, seq = codec.concat_messages(msg_parts)
        commands = Commands.concat(cmd_parts)
        meta = self._load_meta()
        lo = meta.hwm_seq + 1
        new_hwm_seq, new_hwm_t = max(meta.hwm_seq, hwm_seq), max(meta.hwm_t, hwm_t)
        delta = command_log_entry(commands, lo, new_hwm_seq) if len(commands) else None
        want_snapshot = delta is not None and wants_snapshot(meta, len(delta))
        new = (meta.version + 1, _new_tag())
        inputs = PartitionInput(messages, seq, commands, hwm_seq, hwm_t, tuple(sorted(stamps)))
        t_read = time.perf_counter()

        def durable():
            segments = ({int(k[0]): bytes(v[0]) for k, v in self.segment_state.iterator()} if meta.seg_ids else {})
            return (meta.hwm_seq, meta.hwm_t, self._read_log(meta), [segments[i] for i in meta.seg_ids])

        output, snapshot, info = self._exchange(key, (self.token, config), meta, new, inputs, want_snapshot, durable)
        t_host = time.perf_counter()

        t_write = time.perf_counter()

        def take_snapshot() -> bytes | None:
            reply = self._hosts.call(self.stage, key, ("snapshot", self.stage, key, new))
            return reply[1] if reply[0] == "ok" else None

        logged, snapshot = commit_partition_log(meta, _MapStore(self.log_state), delta, snapshot, output.handover_entry,
                                      output.activation_entry, take_snapshot)
        segments = [(codec.pack_messages(messages, seq), messages, seq)] if len(messages) else []
        if output.backfill is not None:  # window messages read back for newly live terms
            segments.append((output.backfill, *codec.unpack_messages(output.backfill)))
        written = logged + commit_segments(meta, _MapStore(self.segment_state), segments, spec,
                                           spec.clock(new_hwm_seq, new_hwm_t))
        meta.version, meta.tag = new
        meta.hwm_seq, meta.hwm_t = new_hwm_seq, new_hwm_t
        meta_blob = meta.to_blob()
        self.meta_state.update((meta_blob,))
        written += len(meta_blob)

        t_emit = time.perf_counter()
        pipeline = config.pipeline
        if config.inline_merge:
            # every subscription has one replica: its reports are final, a stateless merge turns
            # them into events (no merge stage)
            events, _, merge_metrics = MergeCore().apply(list(output.reports.values()))
            if events is not None:  # keyed like the metrics: a merge operator, if any, passes it through
                for piece in split_events(events):
                    yield Row(key=config.bucket_keys[config.partition % len(config.bucket_keys)], pipeline=pipeline,
                              kind="events", payload=piece)
            output.metrics["events"] = merge_metrics["events"]
        else:
            for bucket, blob in sorted(output.reports.items()):
                yield Row(key=config.bucket_keys[bucket], pipeline=pipeline, kind="reports", payload=blob)
        home_bucket = config.bucket_keys[config.partition % len(config.bucket_keys)]
        if output.answers is not None:  # snapshot queries: to the sink's answer files (a merge stage passes them)
            yield Row(key=home_bucket, pipeline=pipeline, kind="answers", payload=output.answers)
        stream_ends = config.final_upto is not None and new_hwm_seq + 1 >= config.final_upto
        if stream_ends or output.metrics["results_requested"]:
            # the stream's last batch, or a producer's results request: the top-k comes from here
            # (single-replica subscriptions) and from every merge bucket of the pipeline (replicated ones)
            reply = self._hosts.call(self.stage, key, ("results", self.stage, key, new))
            if reply[0] != "ok":
                raise HostError(f"no engine for the final results of key {key}")
            yield Row(key=home_bucket, pipeline=pipeline, kind="results", payload=reply[1])
            if not config.inline_merge:
                for bucket_key in config.bucket_keys:
                    yield Row(key=bucket_key, pipeline=pipeline, kind=RESULTS_REQUEST, payload=b"")
        metrics = dict(output.metrics, pipeline=pipeline, stage=PARTITION, partition=config.partition, upto=output.upto,
                       hit=info["hit"], cold=info["cold"], rebuild_s=info["rebuild_s"], host_pid=info["host_pid"],
                       state_bytes_written=written, segments=len(meta.seg_ids), log_entries=log_entry_count(meta.log_ids),
                       snapshot=snapshot is not None, read_s=t_read - t0, host_s=t_host - t_read,
                       write_s=t_emit - t_write, rpc_s=(t_host - t_read) - output.metrics["engine_s"]
                       - output.metrics["report_s"] - info["rebuild_s"],
                       host_peak_rss_bytes=info.get("host_peak_rss_bytes", 0),
                       task_s=time.perf_counter() - t0, spark_partition=_task_partition())
        yield Row(key=home_bucket, pipeline=pipeline, kind="metrics", payload=json.dumps(metrics).encode())


class MergeProcessor(_HostedProcessor):
    """Stage 2: one merge bucket per grouping key (see module docstring)."""

    stage = MERGE

    def __init__(self, token: str, bucket_of_key: dict[int, tuple[int, int]], engine_cache: str = "process",
                 idle_timeout: float = 600.0, slots: int | None = None, files: TaskFiles | None = None) -> None:
        super().__init__(token, engine_cache, idle_timeout, slots, files)
        self.bucket_of_key = bucket_of_key  # grouping key -> (pipeline, bucket)

    def _handle(self, key: int, rows) -> Iterator[Row]:
        t0 = time.perf_counter()
        pipeline, bucket = self.bucket_of_key[key]
        blobs, final = [], False
        for row in rows:
            if row.kind == RESULTS_REQUEST:
                final = True
            elif row.kind != "reports":  # metrics, results, the events of inline pipelines: through
                yield Row(pipeline=row.pipeline, kind=row.kind, payload=row.payload)
            else:
                blobs.append(bytes(row.payload))
        if not blobs and not final:
            return
        meta = self._load_meta()
        new = (meta.version + 1, _new_tag())
        output, snapshot, info = self._exchange(key, (self.token, None), meta, new, blobs, False,
                                                lambda: self._read_log(meta))
        events, delta, metrics = output
        if delta is not None and wants_snapshot(meta, len(delta)):
            # the delta's size is known only now: ask the host for its state, this batch included
            reply = self._hosts.call(self.stage, key, ("snapshot", self.stage, key, new))
            snapshot = reply[1] if reply[0] == "ok" else None
        written = self._write_log(meta, delta, snapshot)
        meta.version, meta.tag = new
        meta_blob = meta.to_blob()
        self.meta_state.update((meta_blob,))
        written += len(meta_blob)
        if events is not None:
            for piece in split_events(events):
                yield Row(pipeline=pipeline, kind="events", payload=piece)
        if final:  # after this batch's reports: the merged top-k of the bucket's subscriptions
            reply = self._hosts.call(self.stage, key, ("results", self.stage, key, new))
            if reply[0] != "ok":
                raise HostError(f"no merge state for the final results of key {key}")
            yield Row(pipeline=pipeline, kind="results", payload=reply[1])
        metrics = dict(metrics, stage=MERGE, pipeline=pipeline, bucket=bucket, hit=info["hit"], cold=info["cold"],
                       rebuild_s=info["rebuild_s"], state_bytes_written=written, log_entries=log_entry_count(meta.log_ids),
                       task_s=time.perf_counter() - t0, spark_partition=_task_partition())
        yield Row(pipeline=pipeline, kind="metrics", payload=json.dumps(metrics).encode())
