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
import sys
import time
from contextlib import contextmanager
from functools import partial
from typing import Iterator

from skype.errors import InputError, OperationalError
from skype.spark import hosts as hosts_mod
from skype.dskype.activation import ActivationConfig
from skype.dskype.kinds import VOCABULARY_FILE
from skype.dskype.partition import PartitionConfig
from skype.dskype.plan import Pipeline, Plan, RunOutcome, RunSettings
from skype.dskype.results import driver_peak_rss_bytes
from skype.spark.sink import EventSink, TaskFiles

# --------------------------------------------------------------------------- the session


def default_driver_memory(master: str | None) -> str:
    """The driver memory when none is given.  In local mode the executors run inside the driver's
    JVM, so its heap holds every batch's state traffic and events: a quarter of the machine's
    memory, between 1g and 8g (Spark's fixed 1g ran out in a 1M-subscription batch,
    docs/results-spark.md).  Elsewhere the executors have their own heaps: Spark's 1g.

    >>> default_driver_memory("spark://host:7077")
    '1g'
    >>> default_driver_memory("local[2]") in {f"{g}g" for g in range(1, 9)}
    True
    """
    if not (master or "").startswith("local"):
        return "1g"
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "1g"
    return f"{max(1, min(8, (total // 4) >> 30))}g"


def session_conf(master: str | None, driver_memory: str | None = None) -> dict[str, str]:
    """Spark settings the job needs (TWS requires RocksDB; see platform notes).  ``master`` None:
    left to spark-submit.  ``driver_memory`` None: :func:`default_driver_memory`."""
    return {
        **({"spark.master": master} if master else {}),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory or default_driver_memory(master),
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def make_session(master: str | None = "local[*]", app_name: str = "skype-dskype", driver_memory: str | None = None,
                 extra: dict[str, str] | None = None):
    """One SparkSession for a run; executors use this interpreter unless told otherwise."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in {**session_conf(master, driver_memory), **(extra or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def executor_cores(spark) -> int | None:
    """Cores of one executor: ``spark.executor.cores`` if set, N of ``local[N]``, else None."""
    conf = spark.sparkContext.getConf()
    cores = conf.get("spark.executor.cores", None)
    if cores:
        return max(1, int(cores))
    master = conf.get("spark.master", "")
    if master.startswith("local[") and master[6:-1].split(",")[0].isdigit():
        return max(1, int(master[6:-1].split(",")[0]))
    if master in ("local", "local[1]"):
        return 1
    return None


# Settings a run takes unless the user gave their own.  The checkpoint's offsets, commits and
# state changelogs are written through Hadoop's FileSystem API rather than FileContext: on the
# local or shared POSIX file system a run directory lives on (docs/spark-design.md), rename is
# atomic under both, and FileContext's calls were a large part of every micro-batch's fixed cost
# (docs/results-spark.md, "The fixed cost of a batch at P = 1, cut").
DEFAULT_SQL_CONF = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}


def configure(spark, plan: Plan) -> None:
    """Session settings a query run needs (the shuffle partitions are frozen at the first run)."""
    if plan.host_slots is None:
        plan.host_slots = executor_cores(spark)
    for key, value in session_conf(None).items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
    for key, value in DEFAULT_SQL_CONF.items():
        if not spark.conf.get(key, None):
            spark.conf.set(key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(plan.shuffle_partitions))


# --------------------------------------------------------------------------- memory of a batch

# Heap a subscription command may cost while its batch runs (routing, the transformWithState state
# server, the partition's command log): 200,000 commands in one batch exhausted a 1 GB heap
# (tweets, prefix, P = 2: at most about 5 KB each), and batches of 65,536 (a quarter of 1 GB at
# 4 KB) ran to the end (docs/results-spark.md).  A batch may spend COMMANDS_SHARE of the heap.
BYTES_PER_COMMAND = 4096
COMMANDS_SHARE = 0.25
MIN_COMMANDS_PER_BATCH = 1000


def memory_bytes(text: str) -> int:
    """A JVM memory setting (``"1g"``, ``"512m"``, ``"1536"`` MiB) in bytes.

    >>> memory_bytes("1g"), memory_bytes("512m"), memory_bytes("2048")
    (1073741824, 536870912, 2147483648)
    """
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    value = text.strip().lower().removesuffix("b")
    if value and value[-1] in units:
        return int(float(value[:-1]) * units[value[-1]])
    return int(float(value) * units["m"])


def batch_heap(spark) -> tuple[str, int]:
    """The JVM memory setting a batch's state traffic lives in, and its bytes: the driver's in
    local mode (the executors run inside it), else the executors'."""
    conf = spark.sparkContext.getConf()
    key = "spark.driver.memory" if conf.get("spark.master", "").startswith("local") else "spark.executor.memory"
    text = conf.get(key, "1g")
    return key, memory_bytes(text)


def commands_cap(spark, settings: RunSettings) -> int | None:
    """Subscription commands per micro-batch, at most (None: no cap): ``--commands-per-batch``,
    else ``COMMANDS_SHARE`` of the batch's heap over ``BYTES_PER_COMMAND``.  E130 when that heap
    holds fewer than ``MIN_COMMANDS_PER_BATCH`` commands."""
    if settings.control.commands_per_batch is not None:
        return settings.control.commands_per_batch or None
    key, heap = batch_heap(spark)
    cap = int(heap * COMMANDS_SHARE / BYTES_PER_COMMAND)
    if cap < MIN_COMMANDS_PER_BATCH:
        need = int(MIN_COMMANDS_PER_BATCH * BYTES_PER_COMMAND / COMMANDS_SHARE)
        raise InputError("E130", setting=key, value=conf_text(spark, key), commands=cap,
                         advice=f"set {key} to at least {-(-need // (1 << 20))}m (--driver-memory), "
                                "or --commands-per-batch")
    return cap


def conf_text(spark, key: str) -> str:
    return spark.sparkContext.getConf().get(key, "1g")


# --------------------------------------------------------------------------- the query


def routes_in_source(settings: RunSettings) -> bool:
    """Whether the source routes as it reads: the staged files' source (not raw files read by
    the executors, not Kafka, whose reader is Spark's)."""
    return settings.source.kind == "files" and not settings.source.vocabulary


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
    """Grouping key -> the partition it holds, for every pipeline."""
    s = plan.settings
    configs = {}
    assert s.distribution.merge_buckets is not None  # RunSettings sets it
    vocab = plan.run_dir / "stream" / VOCABULARY_FILE  # written by staging when terms subscriptions come
    reported = s.statistics_source() == "reports"  # adaptive partitions report the rebalancer's statistics
    for pipe in plan.pipelines:
        native = s.window.kind == "count" and bool(getattr(pipe.distribution, "broadcasts_messages", False))
        activation = activation_config(s, pipe.distribution)
        summaries = summary_dir_of(plan, pipe)
        for p, key in enumerate(pipe.partition_keys):
            configs[key] = PartitionConfig(p, s.distribution.merge_buckets, s.window, tuple(s.distribution.bounds), s.distribution.engine,
                                           tuple(sorted(s.distribution.engine_options.items())), count_native=native,
                                           pipeline=pipe.index, bucket_keys=tuple(pipe.bucket_keys),
                                           inline_merge=pipe.inline_merge, activation=activation,
                                           final_upto=plan.stream_messages,
                                           vocabulary_file=str(vocab) if vocab.exists() else None,
                                           rebalance_dir=rebalance_dir_of(plan, pipe),
                                           num_partitions=len(pipe.partition_keys),
                                           summary_dir=summaries, summary_mode=s.distribution.summaries,
                                           backfill=backfill_source(plan) if summaries else None,
                                           load_stats=reported and rebalance_dir_of(plan, pipe) is not None)
    return configs


def summary_dir_of(plan: Plan, pipe: Pipeline) -> str | None:
    """Where a ``prefix`` pipeline's partitions publish their keyword summaries
    (:mod:`skype.dskype.summaries`): with the loose-prefix activation, unless ``--summaries off``."""
    if plan.settings.distribution.summaries == "off" or activation_config(plan.settings, pipe.distribution) is None:
        return None
    return str(plan.run_dir / "summaries" / pipe.method)


def backfill_source(plan: Plan):
    """The message stream as partitions read it back for newly live terms."""
    from skype.spark.backfill import BackfillSource

    s = plan.settings
    if s.source.vocabulary:  # raw files, tokenized with the shipped vocabulary (skype.spark.ingest)
        return BackfillSource(plan.messages_dir, tuple(s.distribution.bounds), raw=True, vocabulary=s.source.vocabulary,
                              claims=str(plan.run_dir / "unseen-terms"), split=s.source.ingest_split)
    return BackfillSource(plan.messages_dir, tuple(s.distribution.bounds))


def rebalance_dir_of(plan: Plan, pipe: Pipeline) -> str | None:
    """The versioned ownership tables of an adaptive pipeline (:mod:`skype.dskype.handover`)."""
    from skype.dskype.handover import routes_everywhere
    from skype.dskype.rebalancing import rebalance_dir

    return str(rebalance_dir(plan.run_dir, pipe.method)) if routes_everywhere(pipe.distribution) else None


def activates(settings: RunSettings, caps) -> bool:
    """Whether a method of capabilities ``caps`` runs the loose-prefix activation under
    ``settings`` (:func:`activation_config`); from the settings alone, before planning."""
    return bool(caps.activation) and settings.window.kind == "count" and settings.source.kind == "files"


def summarised_methods(settings: RunSettings) -> list[str]:
    """The methods of ``settings`` whose partitions route messages by keyword summaries
    (:func:`summary_dir_of`), known before planning."""
    from skype.partitioning import capabilities_of

    if settings.distribution.summaries == "off":
        return []
    return [method for method in settings.distribution.methods if activates(settings, capabilities_of(method))]


def activation_config(settings: RunSettings, dist) -> ActivationConfig | None:
    """The loose-prefix activation of a ``prefix`` pipeline (:mod:`skype.dskype.activation`): count
    windows only (a batch's expiries are bounded by its size, ``--batch-size``); other
    methods and time windows run every replica (exact mode)."""
    if not activates(settings, dist.capabilities):
        return None
    return ActivationConfig(tuple(int(x) for x in dist.starts), settings.control.batch_size, int(settings.window.size))


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
