"""The DSkype streaming job: start the query of a planned run and wait for it.

The plan (settings, pipelines, run directory layout) is :mod:`skype.dskype.plan`; results and
metrics of a run are in :mod:`skype.dskype.results`, the sink in :mod:`skype.spark.sink` (all
re-exported here; none of them imports this module).  The query (:func:`build_query`): both
sources (stream-event schema) -> ``mapInArrow`` routing (+ ticks; the staged files' source routes
as it reads instead) -> ``transformWithState`` per
subscription partition -> ``transformWithState`` per merge bucket -> ``foreachBatch`` sink.  With
the files sink the stateful tasks replace ``events/<method>/batch-<id>-part-<p>.<fmt>`` (and, in the
stream's last batch, ``results/<method>/...``) themselves, and the driver ``metrics/batch-<id>.json``,
atomically, so a batch that Spark re-runs after a failure or a restart replaces its own output:
nothing is delivered twice.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from functools import partial
from typing import Iterator

from skype.errors import InputError, OperationalError
from skype.spark import hosts as hosts_mod
from skype.dskype.partition import PartitionConfig
from skype.dskype.plan import (Plan, RunOutcome, RunSettings, activates, activation_config,  # noqa: F401  (re-exported)
                               rebalance_dir_of, routes_in_source, summarised_methods, summary_dir_of)
from skype.dskype.plan import partition_configs as plan_configs
from skype.dskype.results import driver_peak_rss_bytes
from skype.spark.session import (BYTES_PER_COMMAND, COMMANDS_SHARE, DEFAULT_SQL_CONF,  # noqa: F401  (re-exported)
                                 MIN_COMMANDS_PER_BATCH, batch_heap, commands_cap, conf_text, configure,
                                 default_driver_memory, executor_cores, make_session, memory_bytes, session_conf)
from skype.spark.sink import EventSink, TaskFiles

# --------------------------------------------------------------------------- the query


def source_events(spark, plan: Plan, routing: dict | None = None):
    """The stream's events; with ``routing`` (only where :func:`routes_in_source`) the routed rows."""
    from skype.spark import sources

    s = plan.settings
    if s.source.vocabulary:  # executors read and tokenize the raw streams (skype.spark.ingest)
        from skype.spark.ingest import raw_events

        return raw_events(spark, plan)
    if s.source.kind == "kafka":
        assert s.source.kafka_bootstrap and s.source.messages_topic and s.source.commands_topic  # RunSettings checks them
        dead = str(plan.dead_letters_dir)  # order checks: skype.dskype.ordering
        messages = sources.kafka_events(spark, s.source.kafka_bootstrap, s.source.messages_topic, "messages", s.control.batch_size,
                                        dense=s.window.kind == "count", dead_letters=dead)
        commands = sources.kafka_events(spark, s.source.kafka_bootstrap, s.source.commands_topic, "commands", dead_letters=dead)
        return messages.unionByName(commands)
    tables = {pipe.index: d for pipe in plan.pipelines if (d := rebalance_dir_of(plan, pipe)) is not None}
    return sources.paired_events(spark, plan.messages_dir, plan.commands_dir, s.control.batch_size, commands_cap(spark, s),
                                 tables=tables, routing=routing)


def partition_configs(plan: Plan) -> dict[int, PartitionConfig]:
    """Grouping key -> the partition it holds, for every pipeline
    (:func:`skype.dskype.plan.partition_configs`, reading window messages back through
    :func:`backfill_source`)."""
    return plan_configs(plan, backfill_source(plan))


def backfill_source(plan: Plan):
    """The message stream as partitions read it back for newly live terms."""
    from skype.spark.backfill import BackfillSource

    s = plan.settings
    if s.source.vocabulary:  # raw files, tokenized with the shipped vocabulary (skype.spark.ingest)
        return BackfillSource(plan.messages_dir, tuple(s.distribution.bounds), raw=True, vocabulary=s.source.vocabulary,
                              claims=str(plan.run_dir / "unseen-terms"), split=s.source.ingest_split)
    return BackfillSource(plan.messages_dir, tuple(s.distribution.bounds))


def closure_bytes(fn) -> int:
    """Bytes of a function as Spark pickles it into a task's closure."""
    from pyspark import cloudpickle

    return len(cloudpickle.dumps(fn))


def build_query(spark, plan: Plan, token: str, sink):
    """The streaming query, ready to start (see module docstring)."""
    from skype.spark.processors import OUTPUT_SCHEMA_DDL, STAGE_SCHEMA_DDL, MergeProcessor, PartitionProcessor
    from skype.dskype.routing import ROUTED_SCHEMA_DDL, route_arrow, ship_routers, write_routers_file

    s = plan.settings
    configure(spark, plan)
    tables = ([pipe.distribution for pipe in plan.pipelines], [pipe.partition_keys for pipe in plan.pipelines],
              [summary_dir_of(plan, pipe) for pipe in plan.pipelines],
              [rebalance_dir_of(plan, pipe) for pipe in plan.pipelines])
    if routes_in_source(s):  # the staged files' source routes as it reads: one Python stage less
        path, plan.routing_table_bytes = write_routers_file(plan.run_dir / "routers", *tables)
        routing = {"routers": path, "bounds": list(s.distribution.bounds), "dead_letters": str(plan.dead_letters_dir)}
        plan.routing_bytes = len(json.dumps(routing))
        routed = source_events(spark, plan, routing)
    else:
        shipped, plan.routing_table_bytes = ship_routers(spark, *tables)
        route = partial(route_arrow, shipped, bounds=tuple(s.distribution.bounds), dead_letters=str(plan.dead_letters_dir))
        plan.routing_bytes = closure_bytes(route)
        routed = source_events(spark, plan).mapInArrow(route, ROUTED_SCHEMA_DDL)
    files = TaskFiles.of(plan) if s.sink.kind == "files" else None  # the stateful tasks write the outputs
    stage1 = routed.groupBy("key").transformWithState(
        PartitionProcessor(token, partition_configs(plan), s.control.engine_cache, s.control.host_idle_timeout,
                           slots=plan.host_slots, files=files),
        STAGE_SCHEMA_DDL, "Update", "None")
    if all(pipe.inline_merge for pipe in plan.pipelines):
        output = stage1.select("pipeline", "kind", "payload")
    else:
        # stage 1 is referenced once: the events of inline pipelines pass through the merge
        # operator (splitting stage 1 into two branches would plan it twice: two operators, two
        # state stores, one engine host stamped by both)
        buckets = {key: (pipe.index, b) for pipe in plan.pipelines for b, key in enumerate(pipe.bucket_keys)}
        output = stage1.groupBy("key").transformWithState(
            MergeProcessor(token, buckets, s.control.engine_cache, s.control.host_idle_timeout, slots=plan.host_slots, files=files),
            OUTPUT_SCHEMA_DDL, "Update", "None")
    writer = output.writeStream.foreachBatch(sink).option("checkpointLocation", plan.spark_checkpoint)
    if s.control.trigger_seconds:
        return writer.trigger(processingTime=f"{s.control.trigger_seconds} seconds")
    return writer.trigger(availableNow=True)


# what a failure for want of memory looks like from the driver: the JVM's error, Python's, or a
# transformWithState task whose state server closed its connection (the server's thread dies of
# java.lang.OutOfMemoryError, which only the JVM's stderr shows)
OUT_OF_MEMORY = ("java.lang.OutOfMemoryError", "MemoryError", "Cannot allocate memory", "_receive_proto_message",
                 "DAGScheduler.cleanupQueryJobs")
# the SparkContext stopped under a running query: in local mode Spark's uncaught-exception handler
# stops it when a task dies of java.lang.OutOfMemoryError (the 1M run, docs/results-spark.md), and
# the query then fails on the missing scheduler, without the OOM in its message
CONTEXT_GONE = "DAGScheduler.cleanupQueryJobs"


def failing_batch(sink: EventSink, query) -> str:
    """The id of the batch a run failed in: the one the sink was writing, else the one after the
    last that completed (Spark's progress; its ids continue across a resumed run's processes)."""
    if sink.running is not None:
        return str(sink.running)
    try:
        last = query.lastProgress if query is not None else None
    except Exception:  # noqa: BLE001 - the JVM may be gone (a run that died of want of memory)
        last = None
    done = [int(last["batchId"])] if last and last.get("batchId") is not None else []
    done += sink.batches[-1:]
    return str(max(done) + 1) if done else "the first of this process"


@contextmanager
def out_of_memory_as_error(spark, sink: EventSink, query, heap_setting: tuple[str, int] | None = None
                           ) -> Iterator[None]:
    """A run that fails for want of memory raises E131 (the batch, what to set), chained to the
    JVM's or the workers' error; other failures pass unchanged.  ``heap_setting``: the
    :func:`batch_heap` of the session, read before the run (a JVM that died cannot be asked)."""
    try:
        yield
    except Exception as err:
        text = str(err)
        found = next((mark for mark in OUT_OF_MEMORY if mark in text), None)
        if found is None:
            raise
        key, heap = heap_setting or batch_heap(spark)
        if found == CONTEXT_GONE:
            where = ("probably out of memory (the SparkContext stopped under the query, as local mode does when a "
                     "task dies of java.lang.OutOfMemoryError; the JVM's stderr says which)")
        elif found == "_receive_proto_message":
            where = ("probably out of memory (a transformWithState task lost its state server's connection, "
                     "as it does when the server's thread dies of java.lang.OutOfMemoryError; the JVM's stderr "
                     "says which)")
        else:
            where = "out of memory (" + next((ln.strip() for ln in text.splitlines() if found in ln), found)[:160] + ")"
        raise OperationalError("E131", batch=failing_batch(sink, query), where=where,
                         advice=f"raise {key} (now {heap >> 20}m; --driver-memory in local mode) or lower "
                                "--commands-per-batch and --batch-size") from err


def run_query(spark, plan: Plan) -> RunOutcome:
    """Start the query and wait: until the input is consumed (availableNow), ``stop_after_batches``
    batches, ``timeout_s`` seconds, or Ctrl-C."""
    s = plan.settings
    token = hosts_mod.new_token()
    sink = EventSink(plan)
    query = build_query(spark, plan, token, sink).start()
    t0 = time.perf_counter()
    stopped = False
    offsets = OffsetCheck(s)
    guard = MemoryGuard.of(spark)
    heap_setting = batch_heap(spark)
    try:
        with out_of_memory_as_error(spark, sink, query, heap_setting):
            while query.isActive:
                query.awaitTermination(0.25)
                if not offsets.passes(query):
                    query.stop()
                    offsets.raise_error()
                if guard is not None and not guard.passes():
                    query.stop()
                    if s.control.engine_cache == "process":
                        stop_local_hosts(plan, token)  # they hold the engines' memory
                    guard.raise_error(sink, query)
                if s.control.stop_after_batches is not None and len(sink.batches) >= s.control.stop_after_batches:
                    query.stop()
                    stopped = True
                elif s.control.timeout_s is not None and time.perf_counter() - t0 > s.control.timeout_s:
                    query.stop()
                    stopped = True
    except KeyboardInterrupt:
        query.stop()
        stopped = True
    wall = time.perf_counter() - t0
    if not offsets.passes(query):  # the batches that ended after the last poll
        offsets.raise_error()
    if query.exception() is not None:
        with out_of_memory_as_error(spark, sink, query, heap_setting):
            raise query.exception()
    progress = [p for p in query.recentProgress if p.get("batchId") is not None]
    if s.control.engine_cache == "process" and spark.conf.get("spark.master", "").startswith("local"):
        stop_local_hosts(plan, token)
    return RunOutcome(plan, sink.batches, progress, wall, stopped, driver_peak_rss_bytes(spark))


# --------------------------------------------------------------------------- memory of the engines

# In local mode the engine hosts run on the driver's machine and hold every hosted subscription:
# their memory grows with the subscriptions, not with the batch (docs/results-spark.md, 1M run).
# The driver stops the run while the machine still has MEMORY_FLOOR_SHARE of its memory
# available (at least MEMORY_FLOOR_MIN_MB), rather than let the kernel's OOM killer end a process.
MEMORY_FLOOR_CONF = "spark.skype.memoryFloorMB"  # 0 turns the guard off
MEMORY_FLOOR_SHARE = 0.05
MEMORY_FLOOR_MIN_MB = 256


def meminfo_mb() -> dict[str, int]:
    """``/proc/meminfo`` in MB (empty where there is none)."""
    out = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                fields = rest.split()
                if fields:
                    out[name] = int(fields[0]) >> 10
    except OSError:
        pass
    return out


class MemoryGuard:
    """Stops a local-mode run before the machine runs out of memory (E123, which says what to
    set).  Invariant: checked between the driver's polls (every 0.25 s), so a run stops within a
    poll of crossing the floor; the batch then running is not committed and a resumed run redoes it."""

    def __init__(self, floor_mb: int) -> None:
        self.floor_mb = floor_mb
        self.available_mb = 0

    @classmethod
    def of(cls, spark) -> MemoryGuard | None:
        """The guard of a session: local masters only (executors elsewhere have their own limits),
        floor from ``spark.skype.memoryFloorMB`` (default: 5% of the machine, at least 256 MB)."""
        if not spark.conf.get("spark.master", "").startswith("local"):
            return None
        info = meminfo_mb()
        if "MemAvailable" not in info:
            return None
        default = max(MEMORY_FLOOR_MIN_MB, int(info.get("MemTotal", 0) * MEMORY_FLOOR_SHARE))
        floor = int(spark.conf.get(MEMORY_FLOOR_CONF, str(default)))
        return cls(floor) if floor > 0 else None

    def passes(self) -> bool:
        self.available_mb = meminfo_mb().get("MemAvailable", self.floor_mb + 1)
        return self.available_mb > self.floor_mb

    def raise_error(self, sink: EventSink, query) -> None:
        hosted, hosts = sink.held()
        raise OperationalError("E123", available=self.available_mb, floor=self.floor_mb, batch=failing_batch(sink, query),
                         hosted=f"{hosted:,}" if hosted else "an unknown number of",
                         hosts=hosts >> 20,
                         advice="the engines hold every subscription in memory on this machine: run on a cluster "
                                "whose executors together hold them (--master spark://..., spark.executor.memory; "
                                "docs/spark.md, Memory), or fewer subscriptions; the run directory resumes a "
                                f"stopped run (--conf {MEMORY_FLOOR_CONF}=MB sets the floor, 0 turns it off)")


class OffsetCheck:
    """A Kafka count window needs every offset of the messages topic to be a message: after each
    batch the driver compares the records the source read with the offsets it covered
    (:func:`skype.dskype.ordering.check_offset_progress`), which also sees a gap that falls between
    two micro-batches.  Other sources and time windows are not checked."""

    def __init__(self, settings) -> None:
        self.topic = settings.source.messages_topic if settings.source.kind == "kafka" and settings.window.kind == "count" else None
        self.checked = -1  # the last batch id checked
        self.error: Exception | None = None

    def passes(self, query) -> bool:
        from skype.dskype.ordering import check_offset_progress

        if self.topic is None:
            return True
        last = query.lastProgress
        if not last or last.get("batchId") is None or int(last["batchId"]) <= self.checked:
            return True
        if int(last["batchId"]) == self.checked + 1:
            new = [last]
        else:  # batches ended between two polls: read the recent ones (only then: the list is long)
            new = [p for p in query.recentProgress if p.get("batchId") is not None and int(p["batchId"]) > self.checked]
        for progress in sorted(new, key=lambda p: int(p["batchId"])):
            try:
                check_offset_progress(progress, self.topic)
            except InputError as err:  # E083: the caller stops the query, then raises it
                self.error = err
                return False
            self.checked = int(progress["batchId"])
        return True

    def raise_error(self) -> None:
        assert self.error is not None
        raise self.error


def stop_local_hosts(plan: Plan, token: str) -> None:
    """In local mode the driver shares the executors' machine: end this run's engine hosts."""
    from multiprocessing.connection import Client

    directory = hosts_mod.socket_dir(token)
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        if name.endswith(".sock"):
            try:
                conn = Client(os.path.join(directory, name), family="AF_UNIX", authkey=token.encode())
                conn.send(("stop",))
                conn.close()
            except (OSError, EOFError, ConnectionError):
                pass
