"""The DSkype streaming job: plan a run, start the query, sink events, report metrics and results.

A *run directory* (``--checkpoint DIR``) holds everything a run needs to resume::

    DIR/run.json              settings, grouping keys, shuffle partitions (checked on restart)
    DIR/distribution-<method>.pkl   each method's distribution, built at the first run
    DIR/stream/messages/      stream files (when the job stages its workload itself)
    DIR/stream/commands/
    DIR/spark/                Spark's checkpoint: offsets, commits, the state store (RocksDB)
    DIR/events/<method>/batch-<id>-part-<p>.parquet   result-change events (or .jsonl), written by executors
    DIR/dead-letters/         records the engine rejected, with their error codes
    DIR/metrics/batch-<id>.json   per-batch metrics of both stateful stages

Results and metrics of a run are in :mod:`skype.spark.results`, the sink in :mod:`skype.spark.sink`
(both re-exported here).  The query (:func:`build_query`): both sources (stream-event schema) -> ``mapInArrow`` routing
(+ ticks) -> ``transformWithState`` per subscription partition -> ``transformWithState`` per merge
bucket -> ``foreachBatch`` sink.  The executors replace ``events/<method>/batch-<id>-part-<p>.<fmt>`` and the
driver ``metrics/batch-<id>.json`` atomically, so a batch that Spark re-runs after a failure or a
restart replaces its own output: nothing is delivered twice.  Final results fold the events of every
committed batch (:func:`final_results`).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from skype.errors import InputError
from skype.spark import hosts as hosts_mod
from skype.spark.activation import ActivationConfig
from skype.spark.keys import grouping_keys
from skype.spark.partition import PartitionConfig
from skype.spark.window import WindowSpec
from skype.spark.results import (  # noqa: F401 - the run's outcome, re-exported
    count_dead_letters, driver_peak_rss_bytes, event_files, final_results, fold_events, folded_results, ranked,
    run_metrics, stage_result_files,
)
from skype.spark.sink import EventSink, events_table, print_events, suffix  # noqa: F401 - re-exported

CHECKED_SETTINGS = ("methods", "partitions", "merge_buckets", "window_kind", "window_size", "bounds", "engine",
                    "engine_options", "n1")
ENGINE_CACHES = ("process", "worker")
SINKS = ("files", "console")
EVENT_FORMATS = ("json", "parquet")
SOURCES = ("files", "kafka")


@dataclass
class RunSettings:
    """Everything that shapes a run (see the ``distributed`` command for each option).

    ``methods``: one distribution method, or several evaluated side by side over the same stream
    (one pipeline each: own partitions, state and events; they share batches and executors).
    """

    methods: tuple
    partitions: int
    batch_size: int
    window_kind: str
    window_size: float
    bounds: tuple
    engine: str = "core"
    engine_options: dict = field(default_factory=dict)
    merge_buckets: int | None = None
    n1: int | None = None
    sample_size: int = 10_000
    thresholds: str = "auto"
    engine_cache: str = "process"
    host_idle_timeout: float = 600.0
    stream_format: str = "parquet"
    events_format: str = "parquet"
    sink: str = "files"
    source: str = "files"
    messages_dir: str | None = None
    commands_dir: str | None = None
    kafka_bootstrap: str | None = None
    messages_topic: str | None = None
    commands_topic: str | None = None
    trigger_seconds: float | None = None  # None: availableNow (process what is there, then stop)
    stop_after_batches: int | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        from skype.partitioning import METHODS

        self.methods = (self.methods,) if isinstance(self.methods, str) else tuple(self.methods)
        for method in self.methods:
            if method not in METHODS:
                raise InputError("E022", what="distribution method", value=method, choices=", ".join(METHODS))
        if not self.methods or len(set(self.methods)) != len(self.methods):
            raise InputError("E023", what="methods", expected="distinct methods, at least one", value=self.methods)
        for name in ("partitions", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError("E023", what=name.replace("_", "-"), expected="an integer >= 1", value=value)
        if self.merge_buckets is None:
            self.merge_buckets = self.partitions
        if self.merge_buckets < 1:
            raise InputError("E023", what="merge-buckets", expected="an integer >= 1", value=self.merge_buckets)
        for name, value, choices in (("engine cache", self.engine_cache, ENGINE_CACHES), ("sink", self.sink, SINKS),
                                     ("events format", self.events_format, EVENT_FORMATS),
                                     ("source", self.source, SOURCES)):
            if value not in choices:
                raise InputError("E022", what=name, value=value, choices=", ".join(choices))
        if self.source == "kafka" and not (self.kafka_bootstrap and self.messages_topic and self.commands_topic):
            raise InputError("E023", what="--source kafka", expected="given with --kafka-bootstrap, --messages-topic "
                                                                     "and --commands-topic", value=self.kafka_bootstrap)
        self.window = WindowSpec(self.window_kind, float(self.window_size))

    def checked(self) -> dict:
        d = asdict(self)
        d["bounds"] = list(self.bounds)
        d["engine_options"] = dict(sorted(self.engine_options.items()))
        d["methods"] = list(self.methods)
        return {k: d[k] for k in CHECKED_SETTINGS}


def single_replica(dist) -> bool:
    """Whether the method places every subscription on exactly one partition (Table 2:
    replication 1), so that partitions' reports are final and no merge stage is needed."""
    return dist.name in ("hashing", "location")


@dataclass
class Pipeline:
    """One method of a run: its distribution and the grouping keys of its partitions and buckets."""

    index: int
    method: str
    distribution: object
    partition_keys: list[int]
    bucket_keys: list[int]

    @property
    def inline_merge(self) -> bool:
        return single_replica(self.distribution)


@dataclass
class Plan:
    """A prepared run: where things are and how partitions map to grouping keys."""

    run_dir: Path
    settings: RunSettings
    pipelines: list[Pipeline]
    shuffle_partitions: int
    resumed: bool
    host_slots: int | None = None  # engine hosts per executor (its cores); None: the machine's cores
    routing_bytes: int = 0  # the pickled mapInArrow closure (what every routing task is sent)
    routing_table_bytes: int = 0  # the broadcast routing tables (sent once per executor)
    stream_messages: int | None = None  # messages in the staged stream (None: an open stream)

    def events_dir_of(self, pipeline: Pipeline) -> Path:
        return self.run_dir / "events" / pipeline.method

    def results_dir_of(self, pipeline: Pipeline) -> Path:
        """The final top-k, written by the stateful stages' tasks in the stream's last batch."""
        return self.run_dir / "results" / pipeline.method

    @property
    def spark_checkpoint(self) -> str:
        return str(self.run_dir / "spark")

    @property
    def dead_letters_dir(self) -> Path:
        """Records the engine rejected, with their error codes (written by the routing tasks)."""
        return self.run_dir / "dead-letters"

    @property
    def metrics_dir(self) -> Path:
        return self.run_dir / "metrics"

    @property
    def messages_dir(self) -> str:
        return self.settings.messages_dir or str(self.run_dir / "stream" / "messages")

    @property
    def commands_dir(self) -> str:
        return self.settings.commands_dir or str(self.run_dir / "stream" / "commands")


# --------------------------------------------------------------------------- planning


def build_distribution_for(settings: RunSettings, method: str, inputs):
    """The distribution of a run, built in exact mode from the workload: its subscriptions and the
    first ``sample_size`` messages (cost model); keyword summaries off (see ``docs/spark.md``)."""
    from skype.partitioning import METHOD_PARAMS, build_distribution, estimate_thresholds
    from skype.partitioning.registry import concat_subscriptions
    from skype.model import Bounds

    subs = concat_subscriptions([inputs.subscriptions] + [b for op, b in inputs.steps if op == "sub"])
    _, first = np.unique(subs.ids, return_index=True)  # an id subscribed again: its first record
    subs = subs.take(np.sort(first))
    messages = inputs.messages()
    sample = messages.slice(0, min(settings.sample_size, len(messages)))
    params = {"summary": False, "bounds": Bounds(*settings.bounds), "n1": settings.n1}
    params = {k: v for k, v in params.items() if k in METHOD_PARAMS[method] and v is not None}
    theta = None
    if method in ("prefix", "spatial-first", "keyword-first") and len(subs) and len(sample):
        if settings.window.kind == "count":
            warm = min(int(settings.window.size), len(sample))
        else:
            warm = int((sample.t > sample.t[-1] - settings.window.size).sum())
        theta = estimate_thresholds(subs, sample, inputs.vocabulary, max(warm, 1), settings.thresholds,
                                    bounds=Bounds(*settings.bounds))
    return build_distribution(method, settings.partitions, subs, sample, inputs.vocabulary, theta, **params)


def plan_run(run_dir: str | Path, settings: RunSettings, inputs=None) -> Plan:
    """Prepare a new run directory, or check and reopen an existing one.

    A new run stages ``inputs`` (unless stream directories or Kafka are given), builds each
    method's distribution and fixes the grouping keys; a resumed run reuses them and refuses
    settings that differ from the first run's.
    """
    from skype.spark.staging import stage_inputs

    run_dir = Path(run_dir)
    meta_path = run_dir / "run.json"
    if meta_path.exists():
        saved = json.loads(meta_path.read_text())
        if saved["settings"] != settings.checked():
            diff = {k: (saved["settings"].get(k), v) for k, v in settings.checked().items()
                    if saved["settings"].get(k) != v}
            raise InputError("E028", path=str(run_dir), detail=json.dumps(diff))
        pipelines = []
        for i, entry in enumerate(saved["pipelines"]):
            with open(run_dir / f"distribution-{entry['method']}.pkl", "rb") as fh:
                pipelines.append(Pipeline(i, entry["method"], pickle.load(fh), entry["partition_keys"],
                                          entry["bucket_keys"]))
        return Plan(run_dir, settings, pipelines, saved["shuffle_partitions"], resumed=True,
                    stream_messages=saved.get("stream_messages"))
    if inputs is None:
        raise InputError("E023", what="a new run", expected="given a workload", value=str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    stream_messages = None
    if settings.source == "files" and settings.messages_dir is None:
        stream_messages = int(inputs.num_messages)
        stage_inputs(inputs, run_dir / "stream" / "messages", run_dir / "stream" / "commands",
                     fmt=settings.stream_format, file_records=max(settings.batch_size, 1000))
    shuffle = max(settings.partitions, settings.merge_buckets)
    n = len(settings.methods)
    pkeys = grouping_keys(n * settings.partitions, shuffle)
    bkeys = grouping_keys(n * settings.merge_buckets, shuffle)
    pipelines = []
    for i, method in enumerate(settings.methods):
        dist = build_distribution_for(settings, method, inputs)
        with open(run_dir / f"distribution-{method}.pkl", "wb") as fh:
            pickle.dump(dist, fh)
        pipelines.append(Pipeline(i, method, dist, pkeys[i * settings.partitions:(i + 1) * settings.partitions],
                                  bkeys[i * settings.merge_buckets:(i + 1) * settings.merge_buckets]))
    meta_path.write_text(json.dumps({
        "settings": settings.checked(), "shuffle_partitions": shuffle, "stream_messages": stream_messages,
        "pipelines": [{"method": p.method, "partition_keys": p.partition_keys, "bucket_keys": p.bucket_keys}
                      for p in pipelines]}, indent=2))
    return Plan(run_dir, settings, pipelines, shuffle, resumed=False, stream_messages=stream_messages)


# --------------------------------------------------------------------------- the session


def session_conf(master: str | None, driver_memory: str = "1g") -> dict[str, str]:
    """Spark settings the job needs (TWS requires RocksDB; see platform notes).  ``master`` None:
    left to spark-submit."""
    return {
        **({"spark.master": master} if master else {}),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory,
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def make_session(master: str | None = "local[*]", app_name: str = "skype-dskype", driver_memory: str = "1g",
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


def configure(spark, plan: Plan) -> None:
    """Session settings a query run needs (the shuffle partitions are frozen at the first run)."""
    if plan.host_slots is None:
        plan.host_slots = executor_cores(spark)
    for key, value in session_conf(None).items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(plan.shuffle_partitions))


# --------------------------------------------------------------------------- the query


def source_events(spark, plan: Plan):
    from skype.spark import sources

    s = plan.settings
    if s.source == "kafka":
        messages = sources.kafka_events(spark, s.kafka_bootstrap, s.messages_topic, "messages", s.batch_size)
        commands = sources.kafka_events(spark, s.kafka_bootstrap, s.commands_topic, "commands")
    else:
        messages = sources.file_events(spark, plan.messages_dir, "messages", s.batch_size)
        commands = sources.file_events(spark, plan.commands_dir, "commands")
    return messages.unionByName(commands)


def partition_configs(plan: Plan) -> dict[int, PartitionConfig]:
    """Grouping key -> the partition it holds, for every pipeline."""
    s = plan.settings
    configs = {}
    for pipe in plan.pipelines:
        native = s.window.kind == "count" and bool(getattr(pipe.distribution, "broadcasts_messages", False))
        activation = activation_config(s, pipe.distribution)
        for p, key in enumerate(pipe.partition_keys):
            configs[key] = PartitionConfig(p, s.merge_buckets, s.window, tuple(s.bounds), s.engine,
                                           tuple(sorted(s.engine_options.items())), count_native=native,
                                           pipeline=pipe.index, bucket_keys=tuple(pipe.bucket_keys),
                                           inline_merge=pipe.inline_merge, activation=activation,
                                           final_upto=plan.stream_messages)
    return configs


def activation_config(settings: RunSettings, dist) -> ActivationConfig | None:
    """The loose-prefix activation of a ``prefix`` pipeline (:mod:`skype.spark.activation`): count
    windows only (a batch's expiries are bounded by its size, ``maxRecordsPerTrigger``); other
    methods and time windows run every replica (exact mode)."""
    if dist.name != "prefix" or settings.window.kind != "count" or settings.source != "files":
        return None
    return ActivationConfig(tuple(int(x) for x in dist.starts), settings.batch_size, int(settings.window.size))


def closure_bytes(fn) -> int:
    """Bytes of a function as Spark pickles it into a task's closure."""
    from pyspark import cloudpickle

    return len(cloudpickle.dumps(fn))


def build_query(spark, plan: Plan, token: str, sink):
    """The streaming query, ready to start (see module docstring)."""
    from skype.spark.processors import OUTPUT_SCHEMA_DDL, STAGE_SCHEMA_DDL, MergeProcessor, PartitionProcessor
    from skype.spark.routing import ROUTED_SCHEMA_DDL, route_arrow, ship_routers

    s = plan.settings
    configure(spark, plan)
    shipped, plan.routing_table_bytes = ship_routers(spark, [pipe.distribution for pipe in plan.pipelines],
                                                     [pipe.partition_keys for pipe in plan.pipelines])
    route = partial(route_arrow, shipped, bounds=tuple(s.bounds), dead_letters=str(plan.dead_letters_dir))
    plan.routing_bytes = closure_bytes(route)
    routed = source_events(spark, plan).mapInArrow(route, ROUTED_SCHEMA_DDL)
    stage1 = routed.groupBy("key").transformWithState(
        PartitionProcessor(token, partition_configs(plan), s.engine_cache, s.host_idle_timeout,
                           slots=plan.host_slots),
        STAGE_SCHEMA_DDL, "Update", "None")
    if all(pipe.inline_merge for pipe in plan.pipelines):
        output = stage1.select("pipeline", "kind", "payload")
    else:
        # stage 1 is referenced once: the events of inline pipelines pass through the merge
        # operator (splitting stage 1 into two branches would plan it twice: two operators, two
        # state stores, one engine host stamped by both)
        buckets = {key: (pipe.index, b) for pipe in plan.pipelines for b, key in enumerate(pipe.bucket_keys)}
        output = stage1.groupBy("key").transformWithState(
            MergeProcessor(token, buckets, s.engine_cache, s.host_idle_timeout, slots=plan.host_slots),
            OUTPUT_SCHEMA_DDL, "Update", "None")
    writer = output.writeStream.foreachBatch(sink).option("checkpointLocation", plan.spark_checkpoint)
    if s.trigger_seconds:
        return writer.trigger(processingTime=f"{s.trigger_seconds} seconds")
    return writer.trigger(availableNow=True)


@dataclass
class RunOutcome:
    plan: Plan
    batches: list[int]
    progress: list[dict]
    wall_s: float
    stopped_early: bool
    driver_peak_rss_bytes: int = 0


def run_query(spark, plan: Plan) -> RunOutcome:
    """Start the query and wait: until the input is consumed (availableNow), ``stop_after_batches``
    batches, ``timeout_s`` seconds, or Ctrl-C."""
    s = plan.settings
    token = hosts_mod.new_token()
    sink = EventSink(plan)
    query = build_query(spark, plan, token, sink).start()
    t0 = time.perf_counter()
    stopped = False
    try:
        while query.isActive:
            query.awaitTermination(0.25)
            if s.stop_after_batches is not None and len(sink.batches) >= s.stop_after_batches:
                query.stop()
                stopped = True
            elif s.timeout_s is not None and time.perf_counter() - t0 > s.timeout_s:
                query.stop()
                stopped = True
    except KeyboardInterrupt:
        query.stop()
        stopped = True
    wall = time.perf_counter() - t0
    if query.exception() is not None:
        raise query.exception()
    progress = [p for p in query.recentProgress if p.get("batchId") is not None]
    if s.engine_cache == "process" and spark.conf.get("spark.master", "").startswith("local"):
        stop_local_hosts(plan, token)
    return RunOutcome(plan, sink.batches, progress, wall, stopped, driver_peak_rss_bytes(spark))


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
