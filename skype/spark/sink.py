"""The ``foreachBatch`` sink of the DSkype job: events written by the executors, metrics by the driver.

**Files** (``--sink files``).  The stateful task that makes a pipeline's events (the partition
task of a method without a merge stage, else the merge bucket's task) writes them itself, one file
per grouping key, ``events/<method>/batch-<id>-part-<p>.<fmt>`` with ``<p>`` = ``p<key>`` (a
partition) or ``m<key>`` (a merge bucket) (:class:`TaskFiles`,
:func:`write_task_files`), replaced atomically under a name unique to the attempt, and returns
only a ``written`` row; the sink then collects the small rows, with no Python stage of its own.
Invariant: a batch Spark re-runs after a failure or a restart brings each key the same input and
state, so its task rewrites exactly its own files with the same events and nothing is delivered
twice; a speculative or zombie attempt cannot tear a file.

**Kafka** (``--sink kafka``).  The tasks turn their event blobs into Kafka records, one per event:
key ``<method>:<subscription id>`` (so one subscription's events stay in order on one topic
partition), value the event as a JSON object (the fields of the event files plus ``method``).
Spark's Kafka writer sends them from the executors.  Kafka has no atomic replace: a batch Spark
re-runs sends its records again, identical (same ``batch``, same content), so delivery is
at-least-once and a consumer that keeps the last ``batch`` it applied per key drops the repeats.
The batch's output is persisted between the write and the collect of the metrics rows, so the
stateful stages run once per batch.

In both modes the final results of the stream's last batch go to ``results/<method>/`` files (the
driver merges them), the answers of snapshot queries to ``answers/<method>/`` files, and the
driver collects only the metrics rows and one row count per task and method, and replaces
``metrics/batch-<id>.json``.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from skype.dskype.staging import suffix, write_table

if TYPE_CHECKING:
    from skype.dskype.plan import Plan


class EventSink:
    """``foreachBatch``: the events are written by the executors, the driver collects only the
    small rows (metrics, and per written file its row count), then writes
    ``metrics/batch-<id>.json`` (module docstring).  ``--sink console`` collects the events to the
    driver and prints them instead."""

    def __init__(self, plan: Plan) -> None:
        self.events_dirs = {pipe.index: plan.events_dir_of(pipe) for pipe in plan.pipelines}
        self.results_dirs = {pipe.index: str(plan.results_dir_of(pipe)) for pipe in plan.pipelines}
        # snapshot query answers go beside the results (skype.dskype.snapshots), keyed -1 - pipeline
        self.results_dirs.update({-1 - pipe.index: str(plan.answers_dir_of(pipe)) for pipe in plan.pipelines})
        self.metrics_dir = plan.metrics_dir
        self.format = plan.settings.sink.events_format
        self.console = plan.settings.sink.kind == "console"
        self.kafka = ((plan.settings.source.kafka_bootstrap, plan.settings.sink.events_topic) if plan.settings.sink.kind == "kafka"
                      else None)
        self.methods = {pipe.index: pipe.method for pipe in plan.pipelines}
        self.batches: list[int] = []  # the batch ids this process wrote (a resumed run's continue Spark's)
        self.running: int | None = None  # the batch being written, until it is recorded
        self.rebalancers = plan.rebalancers  # skype.dskype.rebalancing, one per adaptive pipeline
        self.hosted: dict[tuple[int, int], int] = {}  # (pipeline, partition) -> replicas, as last reported
        self.host_rss: dict[int, int] = {}  # engine host pid -> its peak RSS, as last reported

    def held(self) -> tuple[int, int]:
        """Subscription replicas the partitions last reported, and the engine hosts' peak RSS (bytes)."""
        return sum(self.hosted.values()), sum(self.host_rss.values())

    def __call__(self, df, batch_id: int) -> None:
        self.running = int(batch_id)
        t0 = time.perf_counter()
        events = {pipeline: 0 for pipeline in self.events_dirs}
        if self.console:
            rows = df.collect()
            t_pipeline = time.perf_counter() - t0
            for pipeline, directory in self.events_dirs.items():
                table = events_table([bytes(r.payload) for r in rows if r.kind == "events" and r.pipeline == pipeline],
                                     int(batch_id))
                events[pipeline] = table.num_rows
                print_events(table, int(batch_id), directory.name)
        elif self.kafka is not None:
            convert = partial(kafka_records_arrow, self.methods, int(batch_id), self.results_dirs)
            out = df.mapInArrow(convert, KAFKA_ROWS_DDL).persist()
            try:
                bootstrap, topic = self.kafka
                write_kafka(out.filter(out.kind == EVENT).select("key", "value"), str(bootstrap), str(topic))
                rows = out.filter(out.kind != EVENT).select("pipeline", "kind", "payload").collect()
            finally:
                out.unpersist()
            t_pipeline = time.perf_counter() - t0
        else:  # the stateful tasks wrote the batch's files (TaskFiles): only small rows come back
            rows = df.collect()
            t_pipeline = time.perf_counter() - t0
        events_write_s = 0.0  # the executors' time writing event files (summed over tasks)
        for r in rows:
            if r.kind == "written":
                written = json.loads(bytes(r.payload))
                events[r.pipeline] += int(written["rows"])
                events_write_s += float(written.get("write_s", 0.0))
        metrics = [json.loads(bytes(r.payload)) for r in rows if r.kind == "metrics"]
        for m in metrics:
            if m.get("stage") == "partition":
                ident = (int(m["pipeline"]), int(m["partition"]))
                self.hosted[ident] = int(m.get("hosted", 0))
                self.host_rss[int(m.get("host_pid", 0))] = int(m.get("host_peak_rss_bytes", 0))
        record = {"batch": int(batch_id), "stages": metrics, "sink_s": time.perf_counter() - t0,
                  "pipeline_s": t_pipeline, "events": events, "events_write_s": events_write_s}
        # adaptive pipelines: the next table version, written before the next batch starts
        rebalance = {pipe: rb.after_batch(int(batch_id), metrics) for pipe, rb in self.rebalancers.items()}
        if rebalance:
            record["rebalance"] = rebalance
        write_atomic(self.metrics_dir / f"batch-{batch_id:08d}.json", json.dumps(record))
        self.batches.append(int(batch_id))
        self.running = None


@dataclass(frozen=True)
class TaskFiles:
    """Where the stateful tasks write a batch's outputs with the files sink: per pipeline its
    events directory, its results directory and (keyed ``-1 - pipeline``) its answers directory,
    and the events format (``parquet`` or ``jsonl``)."""

    events: dict[int, str]
    results: dict[int, str]
    fmt: str

    @classmethod
    def of(cls, plan: Plan) -> TaskFiles:
        results = {pipe.index: str(plan.results_dir_of(pipe)) for pipe in plan.pipelines}
        results.update({-1 - pipe.index: str(plan.answers_dir_of(pipe)) for pipe in plan.pipelines})
        return cls({pipe.index: str(plan.events_dir_of(pipe)) for pipe in plan.pipelines}, results,
                   suffix(plan.settings.sink.events_format))


def write_task_files(files: TaskFiles, batch_id: int, part: str, rows) -> list[tuple[int, str, bytes]]:
    """On an executor: write one task's (or one grouping key's) output rows ``(pipeline, kind,
    payload)``: the event blobs as one file per pipeline, ``events/<method>/batch-<id>-part-<p>.<fmt>``
    (``part``: the writer's label, e.g. ``p00003`` for the partition of grouping key 3),
    the final-results blobs (the stream's last batch) as ``results/<method>/batch-<id>-part-<p>.jsonl``,
    lines of the results format sorted by id, and snapshot answers likewise; each file is replaced
    atomically under a name unique to the attempt.  Returns the other rows (metrics), passed
    through, and one ``written`` row per events file."""
    blobs, final, passed = _sorted_rows(rows)
    out = list(zip(*passed))
    for pipeline, parts in sorted(blobs.items()):
        t0 = time.perf_counter()
        table = events_table(parts, batch_id)
        write_table(table, Path(files.events[pipeline]) / f"batch-{batch_id:08d}-part-{part}.{files.fmt}",
                    files.fmt, drop_nulls=False)
        out.append((pipeline, "written", json.dumps({"rows": table.num_rows, "part": part,
                                                     "write_s": time.perf_counter() - t0}).encode()))
    _write_final(final, files.results, batch_id, part)
    return out


def streaming_batch_id() -> int:
    """The micro-batch a task runs for (Spark sets it on every task of a streaming batch)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    value = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if value is None:
        raise RuntimeError("not in a task of a streaming micro-batch: no streaming.sql.batchId")
    return int(value)


EVENT = "event"
KAFKA_ROWS_DDL = "pipeline int, kind string, payload binary, key binary, value binary"


def kafka_records_arrow(methods: dict[int, str], batch_id: int, results_dirs: dict[int, str], batches):
    """On an executor: this task's event blobs as Kafka records (``kind`` = ``event``, ``key``,
    ``value``; see the module docstring), the final-results blobs written as files, metrics rows
    passed through, and one ``written`` row per pipeline with its count of records."""
    import pyarrow as pa

    blobs, final, passed = _sorted_rows(batches)
    part = _task_partition()
    out_pipeline, out_kind, out_payload = passed
    keys: list[bytes | None] = [None] * len(out_kind)
    values: list[bytes | None] = [None] * len(out_kind)
    for pipeline, parts in sorted(blobs.items()):
        key_of, value_of = kafka_records(events_table(parts, batch_id), methods[pipeline])
        out_pipeline += [pipeline] * len(key_of) + [pipeline]
        out_kind += [EVENT] * len(key_of) + ["written"]
        out_payload += [None] * len(key_of) + [json.dumps({"rows": len(key_of), "part": part}).encode()]
        keys += key_of + [None]
        values += value_of + [None]
    _write_final(final, results_dirs, batch_id, f"{part:05d}")
    yield pa.RecordBatch.from_arrays(
        [pa.array(out_pipeline, pa.int32()), pa.array(out_kind, pa.string()), pa.array(out_payload, pa.binary()),
         pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
        names=["pipeline", "kind", "payload", "key", "value"])


def kafka_records(table, method: str) -> tuple[list[bytes], list[bytes]]:
    """Keys and values of the Kafka records of an events table (module docstring)."""
    keys, values = [], []
    for row in table.to_pylist():
        keys.append(f"{method}:{row['sub']}".encode())
        values.append(json.dumps({"method": method, **row}, separators=(",", ":")).encode())
    return keys, values


def write_kafka(records, bootstrap: str, topic: str) -> None:
    """Send a frame of ``key``/``value`` records to ``topic`` with Spark's Kafka writer (from the
    executors; it needs Spark's Kafka connector on the classpath, as ``--source kafka`` does)."""
    records.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()


def _sorted_rows(batches) -> tuple[dict[int, list[bytes]], dict[int, list[bytes]], tuple[list, list, list]]:
    """A task's output rows: event blobs and final-results blobs per pipeline, and the other rows
    (metrics) as ``(pipelines, kinds, payloads)`` to pass through."""
    blobs: dict[int, list[bytes]] = {}
    final: dict[int, list[bytes]] = {}
    out_pipeline: list = []
    out_kind: list = []
    out_payload: list = []
    for pipeline, kind, payload in _row_tuples(batches):
        if kind == "events":
            blobs.setdefault(int(pipeline), []).append(bytes(payload))
        elif kind == "results":
            final.setdefault(int(pipeline), []).append(bytes(payload))
        elif kind == "answers":  # snapshot query answers (JSON lines): written by _write_final
            final.setdefault(-1 - int(pipeline), []).append(bytes(payload))
        else:
            out_pipeline.append(pipeline)
            out_kind.append(kind)
            out_payload.append(payload)
    return blobs, final, (out_pipeline, out_kind, out_payload)


def _row_tuples(batches):
    """``(pipeline, kind, payload)`` of Arrow record batches, or of such tuples as they are."""
    for batch in batches:
        if isinstance(batch, tuple):
            yield batch
            continue
        cols = batch.to_pydict()
        yield from zip(cols["pipeline"], cols["kind"], cols["payload"])


def _task_partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return int(ctx.partitionId()) if ctx is not None else 0


def _write_final(final: dict[int, list[bytes]], results_dirs: dict[int, str], batch_id: int, part: str) -> None:
    """The final-results blobs of the stream's last batch, as ``results/<method>/`` parts."""
    from skype.dskype.reports import results_lines
    from skype.dskype.snapshots import write_part

    for pipeline, parts in sorted(final.items()):
        if pipeline < 0:  # snapshot query answers of pipeline -1 - pipeline, under a name unique to the attempt
            lines = [line for blob in parts for line in blob.decode().splitlines()]
            write_part(results_dirs[pipeline], batch_id, part, lines)
            continue
        write_atomic(Path(results_dirs[pipeline]) / f"batch-{batch_id:08d}-part-{part}.jsonl",
                     "".join(line + "\n" for line in results_lines(parts)))


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text``: written under a name unique to the attempt, then renamed (a
    speculative or zombie attempt writing the same file cannot tear it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def events_table(blobs: list[bytes], batch_id: int):
    """Event blobs -> one pyarrow Table of the public event schema with the ``batch`` column."""
    import pyarrow as pa

    from skype.dskype.reports import events_schema, events_to_arrow

    batches = [events_to_arrow(blob) for blob in blobs]
    table = pa.Table.from_batches(batches, schema=events_schema()) if batches else events_schema().empty_table()
    return table.append_column("batch", pa.array(np.full(table.num_rows, batch_id, np.int64)))


def print_events(table, batch_id: int, method: str, limit: int = 20) -> None:
    print(f"-- batch {batch_id} ({method}): {table.num_rows} result changes")
    for row in table.slice(0, limit).to_pylist():
        entered = [e["id"] for e in row["entered"]]
        flags = "".join(f" {name}" for name in ("created", "removed") if row[name])
        print(f"   sub {row['sub']}: +{entered} -{row['left']}{flags}")
    sys.stdout.flush()
