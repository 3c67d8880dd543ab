"""The ``foreachBatch`` sink of the DSkype job: events written by the executors, metrics by the driver.

Each task of the batch's last stage writes the event blobs it holds as one file per method,
``events/<method>/batch-<id>-part-<spark partition>.<fmt>``, replaced atomically (temporary
name, then rename).  Invariant: a batch Spark re-runs after a failure or a restart has the same
partitions (the shuffle partitions are frozen by the checkpoint), so it rewrites exactly its own
files and nothing is delivered twice.  The driver collects only the metrics rows and one row count
per written file, and replaces ``metrics/batch-<id>.json``.
"""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from skype.spark.staging import write_table

if TYPE_CHECKING:
    from skype.spark.plan import Plan


class EventSink:
    """``foreachBatch``: the events are written by the executors, the driver collects only the
    small rows (metrics, and per written file its row count), then writes
    ``metrics/batch-<id>.json``.

    Each task of the batch's last stage writes the event blobs it holds as one file per pipeline,
    ``events/<method>/batch-<id>-part-<spark partition>.<fmt>`` (:func:`write_events_arrow`),
    replaced atomically: a batch Spark re-runs after a failure or a restart has the same
    partitions (the shuffle partitions are frozen by the checkpoint) and rewrites exactly its own
    files, so nothing is delivered twice.  ``--sink console`` collects the events to the driver
    and prints them instead."""

    def __init__(self, plan: Plan) -> None:
        self.events_dirs = {pipe.index: plan.events_dir_of(pipe) for pipe in plan.pipelines}
        self.results_dirs = {pipe.index: str(plan.results_dir_of(pipe)) for pipe in plan.pipelines}
        self.metrics_dir = plan.metrics_dir
        self.format = plan.settings.events_format
        self.console = plan.settings.sink == "console"
        self.batches: list[int] = []
        self.rebalancers = plan.rebalancers  # skype.spark.rebalancing, one per adaptive pipeline

    def __call__(self, df, batch_id: int) -> None:
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
        else:
            dirs = {pipeline: str(directory) for pipeline, directory in self.events_dirs.items()}
            write = partial(write_events_arrow, dirs, int(batch_id), suffix(self.format), self.results_dirs)
            rows = df.mapInArrow(write, "pipeline int, kind string, payload binary").collect()
            t_pipeline = time.perf_counter() - t0
            for r in rows:
                if r.kind == "written":
                    events[r.pipeline] += int(json.loads(bytes(r.payload))["rows"])
        metrics = [json.loads(bytes(r.payload)) for r in rows if r.kind == "metrics"]
        record = {"batch": int(batch_id), "stages": metrics, "sink_s": time.perf_counter() - t0,
                  "pipeline_s": t_pipeline, "events": events}
        # adaptive pipelines: the next table version, written before the next batch starts
        rebalance = {pipe: rb.after_batch(int(batch_id), metrics) for pipe, rb in self.rebalancers.items()}
        if rebalance:
            record["rebalance"] = rebalance
        write_atomic(self.metrics_dir / f"batch-{batch_id:08d}.json", json.dumps(record))
        self.batches.append(int(batch_id))


def write_events_arrow(dirs: dict[int, str], batch_id: int, fmt: str, results_dirs: dict[int, str], batches):
    """On an executor: write the event blobs of this task as one file per pipeline (see
    :class:`EventSink`), and the final-results blobs (the stream's last batch) as
    ``results/<method>/batch-<id>-part-<p>.jsonl``, lines of the results format sorted by id;
    pass metrics rows through; one ``written`` row per events file."""
    import pyarrow as pa

    from pyspark import TaskContext

    from skype.spark.reports import results_lines

    blobs: dict[int, list[bytes]] = {}
    final: dict[int, list[bytes]] = {}
    out_pipeline, out_kind, out_payload = [], [], []
    for batch in batches:
        cols = batch.to_pydict()
        for pipeline, kind, payload in zip(cols["pipeline"], cols["kind"], cols["payload"]):
            if kind == "events":
                blobs.setdefault(int(pipeline), []).append(bytes(payload))
            elif kind == "results":
                final.setdefault(int(pipeline), []).append(bytes(payload))
            else:
                out_pipeline.append(pipeline)
                out_kind.append(kind)
                out_payload.append(payload)
    ctx = TaskContext.get()
    part = int(ctx.partitionId()) if ctx is not None else 0
    for pipeline, parts in sorted(blobs.items()):
        table = events_table(parts, batch_id)
        write_table(table, Path(dirs[pipeline]) / f"batch-{batch_id:08d}-part-{part:05d}.{fmt}", fmt,
                    drop_nulls=False)
        out_pipeline.append(pipeline)
        out_kind.append("written")
        out_payload.append(json.dumps({"rows": table.num_rows, "part": part}).encode())
    for pipeline, parts in sorted(final.items()):
        write_atomic(Path(results_dirs[pipeline]) / f"batch-{batch_id:08d}-part-{part:05d}.jsonl",
                     "".join(line + "\n" for line in results_lines(parts)))
    yield pa.RecordBatch.from_arrays(
        [pa.array(out_pipeline, pa.int32()), pa.array(out_kind, pa.string()), pa.array(out_payload, pa.binary())],
        names=["pipeline", "kind", "payload"])


def suffix(fmt: str) -> str:
    return "jsonl" if fmt == "json" else "parquet"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def events_table(blobs: list[bytes], batch_id: int):
    """Event blobs -> one pyarrow Table of the public event schema with the ``batch`` column."""
    import pyarrow as pa

    from skype.spark.reports import events_schema, events_to_arrow

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
