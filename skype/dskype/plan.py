"""Planning a DSkype run: its settings, its pipelines (one per method) and its run directory.

A *run directory* (``--checkpoint DIR``) holds everything a run needs to resume::

    DIR/run.json              settings, grouping keys, shuffle partitions, stream length (checked on restart)
    DIR/distribution-<method>.pkl   each method's distribution, built at the first run
    DIR/stream/messages/      stream files (when the job stages its workload itself)
    DIR/stream/commands/
    DIR/spark/                Spark's checkpoint: offsets, commits, the state store (RocksDB)
    DIR/events/<method>/batch-<id>-part-<p>.parquet   result-change events (or .jsonl), written by the
                              stateful task that made them (<p>: p<key> a partition, m<key> a merge bucket)
    DIR/results/<method>/batch-<id>-part-<p>.jsonl    the final top-k, written by the stateful stages
    DIR/answers/<method>/batch-<id>-part-<p>.jsonl    snapshot query answers of the partitions
    DIR/dead-letters/         records the engine rejected, with their error codes
    DIR/metrics/batch-<id>.json   per-batch metrics of both stateful stages; its presence marks the batch's
                              outputs complete (readers ignore files of later batches)
    DIR/rebalance/<method>/   adaptive methods: table versions, the driver's decisions and state
    DIR/routers/              the routing tables the stream files' source reads (one file per query start)

A new run stages its workload, builds each method's distribution and fixes the grouping keys; a
resumed run reloads them and refuses other settings.  The plan also derives what each pipeline's
stages are given (:func:`partition_configs`, :func:`activation_config`, :func:`summary_dir_of`,
:func:`rebalance_dir_of`, :func:`routes_in_source`), from the settings alone.  This module knows
nothing of Spark's query:
:mod:`skype.spark.runtime` runs a plan, :mod:`skype.spark.sink` and :mod:`skype.dskype.results`
write and read its outputs (they import the plan, never the runtime).
"""

from __future__ import annotations

import json
import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np

from skype.errors import InputError
from skype.dskype.keys import grouping_keys
from skype.dskype.loadstats import SOURCES as STATS_SOURCES, stats_source
from skype.dskype.activation import ActivationConfig
from skype.dskype.kinds import VOCABULARY_FILE
from skype.dskype.handover import routes_everywhere
from skype.dskype.partition import PartitionConfig
from skype.dskype.summaries import MessageReadBack
from skype.dskype.window import WindowSpec

CHECKED_SETTINGS = ("methods", "partitions", "merge_buckets", "window_kind", "window_size", "bounds", "engine",
                    "engine_options", "n1", "rebalance", "rebalance_load", "rebalance_stats", "summaries")
ENGINE_CACHES = ("process", "worker")
SINKS = ("files", "console", "kafka")
EVENT_FORMATS = ("json", "parquet")
SOURCES = ("files", "kafka")
SUMMARIES = ("active", "hosted", "off")  # prefix keyword summaries (skype.dskype.summaries)


@dataclass
class SourceSettings:
    """Where the stream comes from: stream files the driver stages (``messages_dir`` None) or
    reads, or Kafka topics; with ``vocabulary`` the executors ingest raw records themselves
    (:mod:`skype.spark.ingest`, ``ingest_split`` records a reading task)."""

    kind: str = "files"                 # SOURCES
    stream_format: str = "parquet"
    messages_dir: str | None = None
    commands_dir: str | None = None
    kafka_bootstrap: str | None = None  # also the sink's broker (--sink kafka)
    messages_topic: str | None = None
    commands_topic: str | None = None
    vocabulary: str | None = None       # executors ingest raw streams with this shipped file
    ingest_split: int = 10_000


@dataclass
class SinkSettings:
    """Where the result-change events go: ``DIR/events`` files, the console, or a Kafka topic."""

    kind: str = "files"                 # SINKS
    events_format: str = "parquet"
    events_topic: str | None = None     # --sink kafka: the topic the executors write the events to


@dataclass
class DistributionSettings:
    """What runs where: the methods over ``partitions`` subscription partitions (and
    ``merge_buckets`` merge keys), their cost model and rebalancing, and the engine each
    partition runs over the window.  Its ``CHECKED_SETTINGS`` are what a resumed run must keep.

    ``methods``: one distribution method, or several evaluated side by side over the same stream
    (one pipeline each: own partitions, state and events; they share batches and executors)."""

    methods: tuple
    partitions: int
    window_kind: str
    window_size: float
    bounds: tuple
    engine: str = "core"
    engine_options: dict = field(default_factory=dict)
    merge_buckets: int | None = None
    n1: int | None = None
    range_cut: str = "balanced"  # term ranges of keyword, prefix and the hybrids (skype.partitioning.ranges)
    sample_size: int = 10_000
    thresholds: str = "auto"
    rebalance: str = "never"  # the rebalancing policy of adaptive methods (skype.dskype.rebalancing)
    rebalance_load: str = "model"  # what the policy balances: its paper's model, or measured engine work
    rebalance_stats: str = "auto"  # where the policy's statistics come from (skype.dskype.loadstats.SOURCES)
    summaries: str = "active"  # prefix: whose terms are live in the keyword summaries (or "off")


@dataclass
class ControlSettings:
    """How the run is driven: batch sizes, triggers, stops, and where the engines live."""

    batch_size: int = 10_000
    commands_per_batch: int | None = None  # None: derived from the memory (skype.spark.runtime.commands_cap); 0: no cap
    trigger_seconds: float | None = None  # None: availableNow (process what is there, then stop)
    stop_after_batches: int | None = None
    timeout_s: float | None = None
    engine_cache: str = "process"
    host_idle_timeout: float = 600.0


# the options of the distributed command, by group (RunSettings.from_options); the workload's and
# the engine's own options are skype.simulate's (source) and skype.engine_settings' (distribution)
SOURCE_OPTIONS = ("source", "stream_format", "messages_dir", "commands_dir", "kafka_bootstrap", "messages_topic",
                  "commands_topic", "vocabulary", "ingest_split")
SINK_OPTIONS = ("sink", "events_format", "events_topic")
DISTRIBUTION_OPTIONS = ("method", "partitions", "merge_buckets", "n1", "range_cut", "sample_size", "thresholds",
                        "rebalance", "rebalance_load", "rebalance_stats", "summaries", "window", "window_seconds")
CONTROL_OPTIONS = ("batch_size", "commands_per_batch", "trigger_seconds", "stop_after_batches", "timeout",
                   "engine_cache", "host_idle")


@dataclass
class RunSettings:
    """Everything that shapes a run (see the ``distributed`` command for each option), in four
    groups: the ``source`` of the stream, the ``sink`` of its events, the ``distribution`` (methods,
    partitions, engine, window) and the run's ``control``.  Built from one mapping of options by
    :meth:`from_options`; checked once, here."""

    source: SourceSettings
    sink: SinkSettings
    distribution: DistributionSettings
    control: ControlSettings

    def __post_init__(self) -> None:
        from skype.partitioning import METHODS

        d, c = self.distribution, self.control
        d.methods = (d.methods,) if isinstance(d.methods, str) else tuple(d.methods)
        for method in d.methods:
            if method not in METHODS:
                raise InputError("E022", what="distribution method", value=method, choices=", ".join(METHODS))
        if not d.methods or len(set(d.methods)) != len(d.methods):
            raise InputError("E023", what="methods", expected="distinct methods, at least one", value=d.methods)
        for name, value in (("partitions", d.partitions), ("batch_size", c.batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError("E023", what=name.replace("_", "-"), expected="an integer >= 1", value=value)
        cap = c.commands_per_batch
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise InputError("E023", what="commands-per-batch", expected="an integer >= 0 (0: no cap)", value=cap)
        from skype.partitioning.ranges import CUTS

        if d.range_cut not in CUTS:
            raise InputError("E022", what="range cut", value=d.range_cut, choices=", ".join(CUTS))
        if d.merge_buckets is None:
            d.merge_buckets = d.partitions
        if d.merge_buckets < 1:
            raise InputError("E023", what="merge-buckets", expected="an integer >= 1", value=d.merge_buckets)
        for what, chosen, choices in (("engine cache", c.engine_cache, ENGINE_CACHES), ("sink", self.sink.kind, SINKS),
                                     ("events format", self.sink.events_format, EVENT_FORMATS),
                                     ("source", self.source.kind, SOURCES), ("summaries", d.summaries, SUMMARIES),
                                     ("rebalancing statistics", d.rebalance_stats, STATS_SOURCES)):
            if chosen not in choices:
                raise InputError("E022", what=what, value=chosen, choices=", ".join(choices))
        src = self.source
        if src.kind == "kafka" and not (src.kafka_bootstrap and src.messages_topic and src.commands_topic):
            raise InputError("E023", what="--source kafka", expected="given with --kafka-bootstrap, --messages-topic "
                                                                     "and --commands-topic", value=src.kafka_bootstrap)
        if self.sink.kind == "kafka" and not (src.kafka_bootstrap and self.sink.events_topic):
            raise InputError("E023", what="--sink kafka", expected="given with --kafka-bootstrap and --events-topic",
                             value=self.sink.events_topic)
        self.window = WindowSpec(d.window_kind, float(d.window_size))

    @classmethod
    def from_options(cls, options: Mapping[str, Any], bounds) -> RunSettings:
        """The settings of one mapping of options (the ``distributed`` command's names, ``_`` for
        ``-``; absent ones at their defaults, unknown ones ignored, so ``vars(args)`` is valid),
        grouped as :data:`SOURCE_OPTIONS`, :data:`SINK_OPTIONS`, :data:`DISTRIBUTION_OPTIONS` (with
        the engine's options, :mod:`skype.engine_settings`) and :data:`CONTROL_OPTIONS`.
        ``bounds``: the space (the workload's; with raw streams, the options')."""
        from skype.engine_settings import EngineSettings, window_of

        def get(name: str, default: Any = None) -> Any:
            value = options.get(name)
            return default if value is None else value

        window = window_of(options)
        kind, size = ("count", window["window"]) if "window" in window else ("time", window["window_seconds"])
        engine = EngineSettings.from_options(options)
        source = SourceSettings(
            kind=get("source", "files"), stream_format=get("stream_format", "parquet"),
            messages_dir=options.get("messages_dir"), commands_dir=options.get("commands_dir"),
            kafka_bootstrap=options.get("kafka_bootstrap"), messages_topic=options.get("messages_topic"),
            commands_topic=options.get("commands_topic"),
            ingest_split=get("ingest_split", 10_000) if options.get("vocabulary") else 10_000)
        sink = SinkSettings(kind=get("sink", "files"), events_format=get("events_format", "parquet"),
                            events_topic=options.get("events_topic"))
        distribution = DistributionSettings(
            methods=get("method", ("prefix",)), partitions=get("partitions", 2), window_kind=kind,
            window_size=float(size), bounds=tuple(bounds.as_tuple()), engine=engine.engine,
            engine_options=engine.engine_options() if engine.engine == "core" else {},
            merge_buckets=options.get("merge_buckets"), n1=options.get("n1"), range_cut=get("range_cut", "balanced"),
            sample_size=get("sample_size", 10_000), thresholds=get("thresholds", "auto"),
            rebalance=get("rebalance", "never"), rebalance_load=get("rebalance_load", "model"),
            rebalance_stats=get("rebalance_stats", "auto"), summaries=get("summaries", "active"))
        control = ControlSettings(
            batch_size=get("batch_size", 10_000), commands_per_batch=options.get("commands_per_batch"),
            trigger_seconds=options.get("trigger_seconds"), stop_after_batches=options.get("stop_after_batches"),
            timeout_s=options.get("timeout"), engine_cache=get("engine_cache", "process"),
            host_idle_timeout=get("host_idle", 600.0))
        return cls(source, sink, distribution, control)

    @property
    def staged(self) -> bool:
        """Whether the driver stages the stream itself (its workload is the whole stream)."""
        return self.source.kind == "files" and self.source.messages_dir is None and not self.source.vocabulary

    def statistics_source(self) -> str | None:
        """Where the live rebalancer's statistics come from (:func:`skype.dskype.loadstats.stats_source`);
        None without a policy."""
        d = self.distribution
        return None if d.rebalance == "never" else stats_source(d.rebalance_stats, self.staged)

    def checked(self) -> dict:
        """What a resumed run must keep (``run.json``): the distribution's :data:`CHECKED_SETTINGS`."""
        d = asdict(self.distribution)
        d["bounds"] = list(self.distribution.bounds)
        d["engine_options"] = dict(sorted(self.distribution.engine_options.items()))
        d["methods"] = list(self.distribution.methods)
        return {k: d[k] for k in CHECKED_SETTINGS}


def single_replica(dist) -> bool:
    """Whether the method places every subscription on exactly one partition (Table 2:
    replication 1), so that partitions' reports are final and no merge stage is needed."""
    return not dist.capabilities.replicated


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
    rebalancers: dict = field(default_factory=dict)  # pipeline -> its driver-side Rebalancer

    def events_dir_of(self, pipeline: Pipeline) -> Path:
        return self.run_dir / "events" / pipeline.method

    def answers_dir_of(self, pipeline: Pipeline) -> Path:
        """Snapshot query answers, one line per (query, answering partition) (skype.dskype.snapshots)."""
        return self.run_dir / "answers" / pipeline.method

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
        return self.settings.source.messages_dir or str(self.run_dir / "stream" / "messages")

    @property
    def commands_dir(self) -> str:
        return self.settings.source.commands_dir or str(self.run_dir / "stream" / "commands")


# --------------------------------------------------------------------------- planning


def build_distribution_for(settings: RunSettings, method: str, inputs):
    """The distribution of a run, built in exact mode from the workload: its subscriptions and the
    first ``sample_size`` messages (cost model); keyword summaries off (see ``docs/spark-design.md``)."""
    from skype.partitioning import METHOD_PARAMS, build_distribution, capabilities_of, estimate_thresholds
    from skype.partitioning.registry import concat_subscriptions
    from skype.model import Bounds

    subs = concat_subscriptions([inputs.subscriptions] + [b for op, b in inputs.steps if op == "sub"])
    _, first = np.unique(subs.ids, return_index=True)  # an id subscribed again: its first record
    subs = subs.take(np.sort(first))
    messages = inputs.messages()
    sample = messages.slice(0, min(settings.distribution.sample_size, len(messages)))
    params = {"summary": False, "bounds": Bounds(*settings.distribution.bounds), "n1": settings.distribution.n1, "cut": settings.distribution.range_cut}
    params = {k: v for k, v in params.items() if k in METHOD_PARAMS[method] and v is not None}
    theta = None
    if capabilities_of(method).thresholds and len(subs) and len(sample):
        if settings.window.kind == "count":
            warm = min(int(settings.window.size), len(sample))
        else:
            warm = int((sample.t > sample.t[-1] - settings.window.size).sum())
        theta = estimate_thresholds(subs, sample, inputs.vocabulary, max(warm, 1), settings.distribution.thresholds,
                                    bounds=Bounds(*settings.distribution.bounds))
    return build_distribution(method, settings.distribution.partitions, subs, sample, inputs.vocabulary, theta, **params)


def plan_run(run_dir: str | Path, settings: RunSettings, inputs=None, stream_messages: int | None = None) -> Plan:
    """Prepare a new run directory, or check and reopen an existing one.

    A new run stages ``inputs`` (unless stream directories or Kafka are given), builds each
    method's distribution and fixes the grouping keys; a resumed run reuses them and refuses
    settings that differ from the first run's.  ``stream_messages``: the length of a stream the
    job did not stage (executor ingestion), so that the stages know its last batch.
    """
    from skype.dskype.staging import stage_inputs

    run_dir = Path(run_dir)
    meta_path = run_dir / "run.json"
    if meta_path.exists():
        saved = json.loads(meta_path.read_text())
        saved["settings"].setdefault("rebalance", "never")  # run directories from before live rebalancing
        saved["settings"].setdefault("rebalance_load", "model")
        saved["settings"].setdefault("rebalance_stats", "auto")  # run directories from before reported statistics
        # runs from before keyword summaries routed every term: any mode resumes them exactly
        saved["settings"].setdefault("summaries", settings.distribution.summaries)
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
    if settings.source.kind == "files" and settings.source.messages_dir is None:
        stream_messages = int(inputs.num_messages)
        stage_inputs(inputs, run_dir / "stream" / "messages", run_dir / "stream" / "commands",
                     fmt=settings.source.stream_format, file_records=max(settings.control.batch_size, 1000))
    buckets = settings.distribution.partitions if settings.distribution.merge_buckets is None else settings.distribution.merge_buckets
    shuffle = max(settings.distribution.partitions, buckets)
    n = len(settings.distribution.methods)
    pkeys = grouping_keys(n * settings.distribution.partitions, shuffle)
    bkeys = grouping_keys(n * buckets, shuffle)
    pipelines = []
    for i, method in enumerate(settings.distribution.methods):
        dist = build_distribution_for(settings, method, inputs)
        with open(run_dir / f"distribution-{method}.pkl", "wb") as fh:
            pickle.dump(dist, fh)
        pipelines.append(Pipeline(i, method, dist, pkeys[i * settings.distribution.partitions:(i + 1) * settings.distribution.partitions],
                                  bkeys[i * buckets:(i + 1) * buckets]))
    meta_path.write_text(json.dumps({
        "settings": settings.checked(), "shuffle_partitions": shuffle, "stream_messages": stream_messages,
        "pipelines": [{"method": p.method, "partition_keys": p.partition_keys, "bucket_keys": p.bucket_keys}
                      for p in pipelines]}, indent=2))
    return Plan(run_dir, settings, pipelines, shuffle, resumed=False, stream_messages=stream_messages)


@dataclass
class RunOutcome:
    plan: Plan
    batches: list[int]
    progress: list[dict]
    wall_s: float
    stopped_early: bool
    driver_peak_rss_bytes: int = 0


# --------------------------------------------------------------------------- what the stages are given


def routes_in_source(settings: RunSettings) -> bool:
    """Whether the source routes as it reads: the staged files' source (not raw files read by
    the executors, not Kafka, whose reader is Spark's)."""
    return settings.source.kind == "files" and not settings.source.vocabulary


def partition_configs(plan: Plan, backfill: MessageReadBack | None = None) -> dict[int, PartitionConfig]:
    """Grouping key -> the partition it holds, for every pipeline; ``backfill``: where partitions
    with keyword summaries read window messages back (the adapter's source)."""
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
                                           backfill=backfill if summaries else None,
                                           load_stats=reported and rebalance_dir_of(plan, pipe) is not None)
    return configs


def summary_dir_of(plan: Plan, pipe: Pipeline) -> str | None:
    """Where a ``prefix`` pipeline's partitions publish their keyword summaries
    (:mod:`skype.dskype.summaries`): with the loose-prefix activation, unless ``--summaries off``."""
    if plan.settings.distribution.summaries == "off" or activation_config(plan.settings, pipe.distribution) is None:
        return None
    return str(plan.run_dir / "summaries" / pipe.method)


def rebalance_dir(run_dir: Path, method: str) -> Path:
    """``DIR/rebalance/<method>/``: an adaptive pipeline's table versions and the driver's decisions."""
    return Path(run_dir) / "rebalance" / method


def rebalance_dir_of(plan: Plan, pipe: Pipeline) -> str | None:
    """The versioned ownership tables of an adaptive pipeline (:mod:`skype.dskype.handover`)."""
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
