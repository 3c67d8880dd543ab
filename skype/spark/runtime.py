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

The query (:func:`build_query`): both sources (stream-event schema) -> ``mapInArrow`` routing
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
from skype.model import Match
from skype.spark import hosts as hosts_mod
from skype.spark.keys import grouping_keys
from skype.spark.partition import PartitionConfig, WindowSpec
from skype.spark.staging import write_table

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
        from skype.dist import METHODS

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

    def events_dir_of(self, pipeline: Pipeline) -> Path:
        return self.run_dir / "events" / pipeline.method

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
    from skype.dist import METHOD_PARAMS, build_distribution, estimate_thresholds
    from skype.dist.registry import concat_subscriptions
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
        return Plan(run_dir, settings, pipelines, saved["shuffle_partitions"], resumed=True)
    if inputs is None:
        raise InputError("E023", what="a new run", expected="given a workload", value=str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    if settings.source == "files" and settings.messages_dir is None:
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
        "settings": settings.checked(), "shuffle_partitions": shuffle,
        "pipelines": [{"method": p.method, "partition_keys": p.partition_keys, "bucket_keys": p.bucket_keys}
                      for p in pipelines]}, indent=2))
    return Plan(run_dir, settings, pipelines, shuffle, resumed=False)


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
        for p, key in enumerate(pipe.partition_keys):
            configs[key] = PartitionConfig(p, s.merge_buckets, s.window, tuple(s.bounds), s.engine,
                                           tuple(sorted(s.engine_options.items())), count_native=native,
                                           pipeline=pipe.index, bucket_keys=tuple(pipe.bucket_keys),
                                           inline_merge=pipe.inline_merge)
    return configs


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
        self.metrics_dir = plan.metrics_dir
        self.format = plan.settings.events_format
        self.console = plan.settings.sink == "console"
        self.batches: list[int] = []

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
            write = partial(write_events_arrow, dirs, int(batch_id), _suffix(self.format))
            rows = df.mapInArrow(write, "pipeline int, kind string, payload binary").collect()
            t_pipeline = time.perf_counter() - t0
            for r in rows:
                if r.kind == "written":
                    events[r.pipeline] += int(json.loads(bytes(r.payload))["rows"])
        metrics = [json.loads(bytes(r.payload)) for r in rows if r.kind == "metrics"]
        record = {"batch": int(batch_id), "stages": metrics, "sink_s": time.perf_counter() - t0,
                  "pipeline_s": t_pipeline, "events": events}
        _write_atomic(self.metrics_dir / f"batch-{batch_id:08d}.json", json.dumps(record))
        self.batches.append(int(batch_id))


def write_events_arrow(dirs: dict[int, str], batch_id: int, fmt: str, batches):
    """On an executor: write the event blobs of this task as one file per pipeline (see
    :class:`EventSink`); pass metrics rows through; one ``written`` row per file."""
    import pyarrow as pa

    from pyspark import TaskContext

    blobs: dict[int, list[bytes]] = {}
    out_pipeline, out_kind, out_payload = [], [], []
    for batch in batches:
        cols = batch.to_pydict()
        for pipeline, kind, payload in zip(cols["pipeline"], cols["kind"], cols["payload"]):
            if kind == "events":
                blobs.setdefault(int(pipeline), []).append(bytes(payload))
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
    yield pa.RecordBatch.from_arrays(
        [pa.array(out_pipeline, pa.int32()), pa.array(out_kind, pa.string()), pa.array(out_payload, pa.binary())],
        names=["pipeline", "kind", "payload"])


def _suffix(fmt: str) -> str:
    return "jsonl" if fmt == "json" else "parquet"


def _write_atomic(path: Path, text: str) -> None:
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


# --------------------------------------------------------------------------- results and metrics


def fold_events(rows, state: dict | None = None) -> dict[int, dict[int, tuple[float, int]]]:
    """Apply event rows (in batch order) to ``{sub: {message: (score, seq)}}``: ``created`` starts
    an empty top-k, ``left`` removes, ``entered`` adds, ``removed`` deletes the subscription."""
    state = {} if state is None else state
    for row in rows:
        sid = row["sub"]
        if row["created"] or sid not in state:
            state[sid] = {}
        entries = state[sid]
        for m in row["left"] or ():
            entries.pop(m, None)
        for e in row["entered"] or ():
            entries[e["id"]] = (e["score"], e["seq"])
        if row["removed"]:
            del state[sid]
    return state


def ranked(entries: dict[int, tuple[float, int]]) -> list[Match]:
    """A top-k in ranking order: score descending, then the newer message (larger seq) first."""
    return [Match(m, sc) for m, (sc, _) in sorted(entries.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))]


def event_files(plan: Plan, pipeline: Pipeline) -> list[Path]:
    """A pipeline's event files in batch order (``batch-<id>-part-<p>``: the name sorts by batch;
    a subscription's events of one batch are in one part)."""
    return sorted(plan.events_dir_of(pipeline).glob(f"batch-*.{_suffix(plan.settings.events_format)}"))


def read_event_rows(path: Path, fmt: str) -> list[dict]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def final_results(plan: Plan, pipeline: Pipeline) -> list[tuple[int, list[Match]]]:
    """Every subscription's final top-k, by ascending id (the centralized CLI's results): the
    events of every batch, folded in batch order on the driver (the results file is written
    there anyway; memory is one top-k per subscription)."""
    state: dict = {}
    batches: dict[str, list[dict]] = {}
    for path in event_files(plan, pipeline):
        batches.setdefault(path.name.split("-part-")[0], []).extend(read_event_rows(path, plan.settings.events_format))
    for name in sorted(batches):
        # a subscription that moved within the batch (unsubscribed on one partition, subscribed on
        # another: two parts) is removed before it is created again
        rows = sorted(batches[name], key=lambda r: 0 if r["removed"] and not r["created"] else 1)
        fold_events(rows, state)
    return [(sid, ranked(state[sid])) for sid in sorted(state)]


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q)) if values else 0.0


def run_metrics(plan: Plan, outcome: RunOutcome, pipeline: Pipeline) -> dict:
    """A pipeline's metrics over the run (see ``docs/spark.md`` for each definition); batch times
    are shared by the run's pipelines."""
    records = []
    for batch in outcome.batches:
        path = plan.metrics_dir / f"batch-{batch:08d}.json"
        if path.exists():
            record = json.loads(path.read_text())
            record["stages"] = [m for m in record["stages"] if m["pipeline"] == pipeline.index]
            record["events"] = record["events"].get(str(pipeline.index), 0)
            records.append(record)
    parts = [m for r in records for m in r["stages"] if m["stage"] == "partition"]
    merges = [m for r in records for m in r["stages"] if m["stage"] == "merge"]
    by_batch = {r["batch"]: r for r in records}
    progress = [p for p in outcome.progress if p["batchId"] in by_batch]
    latency = [float(p["durationMs"].get("triggerExecution", 0.0)) for p in progress]
    messages = (max(m["upto"] for m in parts) - min(m["first_seq"] for m in parts)) if parts else 0
    busy_s = sum(latency) / 1000.0
    P = plan.settings.partitions
    work = np.zeros(P)
    received = np.zeros(P)
    hosted = np.zeros(P)
    for m in parts:
        work[m["partition"]] += m["engine_s"] + m["report_s"]
        received[m["partition"]] += m["messages"]
    last: dict[int, dict] = {}
    for m in parts:
        last[m["partition"]] = m
    for p, m in last.items():
        hosted[p] = m["hosted"]
    distinct = sum(m["hosted_inverse_replication"] for m in last.values())
    seen: set[tuple[str, int]] = set()
    steady_hits = steady_total = 0
    for r in records:
        for m in r["stages"]:
            ident = (m["stage"], m.get("partition", m.get("bucket")))
            if ident in seen:
                steady_total += 1
                steady_hits += bool(m["hit"])
            seen.add(ident)
    written = [sum(m["state_bytes_written"] for m in r["stages"]) for r in records]
    written_parts = [sum(m["state_bytes_written"] for m in r["stages"] if m["stage"] == "partition") for r in records]
    written_merge = [sum(m["state_bytes_written"] for m in r["stages"] if m["stage"] == "merge") for r in records]
    mean_work = float(work.mean()) if P else 0.0
    return {
        "method": pipeline.method, "partitions": P, "merge_buckets": plan.settings.merge_buckets,
        "batch_size": plan.settings.batch_size, "window": plan.settings.window.centralized(),
        "batches": len(records), "messages": int(messages), "resumed": plan.resumed,
        "stopped_early": outcome.stopped_early,
        "throughput_msgs_per_s": messages / busy_s if busy_s > 0 else 0.0,
        "wall_throughput_msgs_per_s": messages / outcome.wall_s if outcome.wall_s > 0 else 0.0,
        "wall_s": outcome.wall_s, "batch_time_s": busy_s,
        "batch_latency_ms_p50": _percentile(latency, 50), "batch_latency_ms_p99": _percentile(latency, 99),
        "batch_latency_ms": latency,
        "batch_durations_ms": [p["durationMs"] for p in progress],
        "communication_per_message": float(received.sum() / messages) if messages else 0.0,
        "replication_ratio": float(hosted.sum() / distinct) if distinct > 0 else 0.0,
        "load_imbalance": float(work.max() / mean_work) if mean_work > 0 else 1.0,
        "work_s_per_partition": work.tolist(), "messages_per_partition": received.tolist(),
        "cache_hit_rate": (sum(bool(m["hit"]) for m in parts) / len(parts)) if parts else 0.0,
        "cache_hit_rate_steady": (steady_hits / steady_total) if steady_total else 0.0,
        "merge_cache_hit_rate": (sum(bool(m["hit"]) for m in merges) / len(merges)) if merges else 0.0,
        "cache_rebuilds": sum(not m["hit"] for m in parts + merges),
        "rebuild_s": sum(m["rebuild_s"] for m in parts + merges),
        "state_bytes_written_per_batch": float(np.mean(written)) if written else 0.0,
        "state_bytes_written_per_batch_steady": float(np.mean(written[1:])) if len(written) > 1 else 0.0,
        "state_bytes_written_partitions_per_batch": float(np.mean(written_parts)) if written_parts else 0.0,
        "state_bytes_written_merge_per_batch": float(np.mean(written_merge)) if written_merge else 0.0,
        "state_bytes_written_partitions_per_batch_steady": float(np.mean(written_parts[1:])) if len(written) > 1 else 0.0,
        "state_bytes_written_merge_per_batch_steady": float(np.mean(written_merge[1:])) if len(written) > 1 else 0.0,
        "batch_latency_ms_p50_steady": _percentile(latency[1:], 50),
        "state_bytes_written": written,
        "result_events": sum(r["events"] for r in records),
        "engine_cache": plan.settings.engine_cache,
        "routing_bytes": plan.routing_bytes, "routing_table_bytes": plan.routing_table_bytes,
        "driver_peak_rss_bytes": outcome.driver_peak_rss_bytes,
        "dead_letters": count_dead_letters(plan),
        "host_peak_rss_bytes": max((int(m.get("host_peak_rss_bytes", 0)) for m in parts + merges), default=0),
        "batch_breakdown_s": _breakdown(records, progress),
    }


def _breakdown(records: list[dict], progress: list[dict]) -> dict:
    """Where the batches' time went, summed over the run (seconds): Spark's own phases
    (``durationMs``), the sink, and inside the partition tasks (max over partitions per batch):
    reading input rows and state, the host call (engine, reports, RPC) and the state writes."""
    out: dict[str, float] = {}
    for p in progress:
        for name, ms in p.get("durationMs", {}).items():
            out[f"spark_{name}"] = out.get(f"spark_{name}", 0.0) + ms / 1000.0
    for r in records:
        parts = [m for m in r["stages"] if m["stage"] == "partition"]
        merges = [m for m in r["stages"] if m["stage"] == "merge"]
        out["sink"] = out.get("sink", 0.0) + r.get("sink_s", 0.0) - r.get("pipeline_s", 0.0)
        for name in ("read_s", "host_s", "engine_s", "report_s", "write_s", "task_s", "rpc_s"):
            vals = [m.get(name, 0.0) for m in parts]
            if vals:
                out[f"partition_{name}"] = out.get(f"partition_{name}", 0.0) + max(vals)
        if merges:
            out["merge_task_s"] = out.get("merge_task_s", 0.0) + max(m.get("task_s", 0.0) for m in merges)
    return {k: round(v, 3) for k, v in sorted(out.items())}


def count_dead_letters(plan: Plan) -> int:
    """Rejected records of the run (lines of the dead-letter files)."""
    if not plan.dead_letters_dir.is_dir():
        return 0
    total = 0
    for path in plan.dead_letters_dir.glob("*.jsonl"):
        with open(path, "rb") as fh:
            total += sum(1 for line in fh if line.strip())
    return total


def driver_peak_rss_bytes(spark=None) -> int:
    """Peak resident memory of the driver: this Python process plus, when it started one, its
    JVM (``VmHWM`` of the gateway process)."""
    import resource

    total = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    try:
        pid = spark.sparkContext._gateway.proc.pid if spark is not None else None
    except AttributeError:
        pid = None
    if pid:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total
