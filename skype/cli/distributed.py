"""``python -m skype.run distributed``: DSkype on Apache Spark (Structured Streaming).

Loads the workload like ``simulate`` (same options), writes it as stream files into the run
directory (``--checkpoint``), builds the distribution (``--method`` over ``--partitions``
subscription partitions), and streams it through Spark in micro-batches of ``--batch-size``
messages: routing, one stateful engine per partition on the executors, an exact merge of
replicated subscriptions, result-change events to ``DIR/events``.  The final top-k goes to
``--results-out`` (the same JSONL as ``simulate --results-out``), metrics to ``--metrics-out``.

With ``--vocabulary FILE`` (``python -m skype.run vocabulary``) the driver does not load the
workload: executors read the raw ``--messages``/``--subscriptions`` files (or ``--messages-dir``/
``--commands-dir``) in parallel and tokenize them with the shipped vocabulary; the distribution is
built from a sample of the stream.

Run it again with the same ``--checkpoint`` to resume a stopped run (``--stop-after-batches N``
stops one on purpose).  Needs the ``spark`` extra (pyspark, Java 17); pyspark is imported only
when the command runs.  On a cluster use ``spark-submit skype/spark/app.py`` with the same
options (see ``docs/spark.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from skype.cli.inputs import add_workload_args, load_inputs, window_of
from skype.cli.report import machine_info, print_table
from skype.cli.simulate import add_engine_args, engine_options
from skype.partitioning import ADAPTIVE_METHODS, STATIC_METHODS
from skype.partitioning.rebalance import POLICIES
from skype.errors import InputError

REBALANCE_CHOICES = (*POLICIES, "paper")


def _conf_pair(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def _methods(text: str) -> tuple[str, ...]:
    """A method, a comma list, or ``all`` (the six static methods).  The adaptive ones (agrid, kdt,
    qt, aqwa) run with live rebalancing (``--rebalance``) on staged streams."""
    names = STATIC_METHODS if text == "all" else tuple(m.strip() for m in text.split(",") if m.strip())
    bad = [m for m in names if m not in STATIC_METHODS + ADAPTIVE_METHODS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown method {bad[0] if bad else text!r}; choose from "
                                         f"{', '.join(STATIC_METHODS + ADAPTIVE_METHODS)} or 'all' (the static ones)")
    return names


def per_method(path: str, method: str, several: bool) -> str:
    """``r.jsonl`` -> ``r.<method>.jsonl`` when a run has several methods."""
    if not several:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{method}{p.suffix}"))


def add_distributed_args(p: argparse.ArgumentParser, *, master: bool = True) -> None:
    """Options of ``distributed`` beyond the workload and engine (shared with the Spark app)."""
    d = p.add_argument_group("distribution")
    d.add_argument("--method", type=_methods, default=("prefix",), metavar="M[,M...]|all",
                   help=f"distribution method: one of {', '.join(STATIC_METHODS)} or an adaptive one "
                        f"({', '.join(ADAPTIVE_METHODS)}: live rebalancing, staged streams only); a comma list or "
                        "'all' (the static ones) runs several side by side over the same stream (default: prefix)")
    d.add_argument("--rebalance", choices=REBALANCE_CHOICES, default="never", metavar="POLICY",
                   help=f"rebalancing policy of the adaptive methods, applied live at batch boundaries: one of "
                        f"{', '.join(REBALANCE_CHOICES)} (paper: each method's own, tornado for agrid, ps2stream "
                        "for kdt, sstd for qt, aqwa for aqwa; default: %(default)s; docs/spark.md, 'Live "
                        "rebalancing')")
    d.add_argument("--rebalance-load", choices=("model", "measured"), default="model",
                   help="what the policy balances: its paper's load model (replicas x messages routed; default) "
                        "or each partition's measured engine and report seconds of the last batch")
    d.add_argument("--summaries", choices=("active", "hosted", "off"), default="active",
                   help="prefix on a count window: keyword summaries, a message goes to a partition only for its "
                        "terms some replica there holds; 'active': awake replicas (the paper's loose prefixes), "
                        "'hosted': every hosted record, 'off': every term (default: %(default)s; docs/spark.md)")
    d.add_argument("--partitions", type=int, default=2, help="subscription partitions P (default: %(default)s)")
    d.add_argument("--merge-buckets", type=int, help="merge-stage keys (default: P)")
    d.add_argument("--n1", type=int, help="outer partitions of a hybrid (a divisor of P)")
    d.add_argument("--sample-size", type=int, default=10_000,
                   help="first messages used as the distribution's cost sample (default: %(default)s)")
    d.add_argument("--thresholds", choices=("auto", "core", "reference", "kscore", "none"), default="auto",
                   help="engine estimating theta_s for the prefix cost model (default: %(default)s)")
    s = p.add_argument_group("spark")
    if master:
        s.add_argument("--master", default="local[*]", help="Spark master (default: %(default)s)")
        s.add_argument("--driver-memory", default="1g", help="driver memory (default: %(default)s)")
    s.add_argument("--batch-size", type=int, default=10_000, help="messages per micro-batch (default: %(default)s)")
    s.add_argument("--checkpoint", metavar="DIR",
                   help="run directory: Spark checkpoint, stream files, events (default: out/dskype-<time>)")
    s.add_argument("--conf", type=_conf_pair, action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting (repeatable)")
    s.add_argument("--engine-cache", choices=("process", "worker"), default="process",
                   help="keep live engines in engine host processes on each executor (default) or in the "
                        "Python worker that runs the task")
    s.add_argument("--host-idle", type=float, default=600.0, metavar="SECONDS",
                   help="an idle engine host exits after this long (default: %(default)s)")
    s.add_argument("--trigger-seconds", type=float,
                   help="run continuously with this trigger interval (default: process what is there, then stop)")
    s.add_argument("--stop-after-batches", type=int, metavar="N", help="stop after N micro-batches (resume later)")
    s.add_argument("--timeout", type=float, metavar="SECONDS", help="stop after this many seconds")
    src = p.add_argument_group("stream sources")
    src.add_argument("--source", choices=("files", "kafka"), default="files",
                     help="stream files (default) or Kafka topics")
    src.add_argument("--stream-format", choices=("parquet", "jsonl"), default="parquet",
                     help="format of the stream files the job writes (default: %(default)s)")
    src.add_argument("--messages-dir", metavar="DIR", help="read messages from this stream-file directory")
    src.add_argument("--commands-dir", metavar="DIR", help="read subscription commands from this directory")
    src.add_argument("--ingest-split", type=int, default=10_000, metavar="N",
                     help="with --vocabulary: raw records per reading task (default: %(default)s)")
    src.add_argument("--kafka-bootstrap", metavar="HOST:PORT")
    src.add_argument("--messages-topic")
    src.add_argument("--commands-topic")
    o = p.add_argument_group("output")
    o.add_argument("--results-out", metavar="FILE", help="final top-k of every subscription (JSONL or Parquet)")
    o.add_argument("--metrics-out", metavar="FILE", help="run metrics as JSON")
    o.add_argument("--sink", choices=("files", "console", "kafka"), default="files",
                   help="result-change events to DIR/events (default), the console, or the Kafka topic "
                        "--events-topic at --kafka-bootstrap (sent by the executors; at-least-once)")
    o.add_argument("--events-topic", metavar="TOPIC", help="with --sink kafka: the topic of the events")
    o.add_argument("--events-format", choices=("json", "parquet"), default="parquet",
                   help="format of DIR/events (default: %(default)s)")


def settings_from_args(args: argparse.Namespace, bounds):
    from skype.spark.runtime import RunSettings

    window = window_of(args)
    kind, size = ("count", window["window"]) if "window" in window else ("time", window["window_seconds"])
    if args.sink == "console" and args.results_out:
        raise InputError("E023", what="--results-out", expected="used with --sink files (results fold the events)",
                         value=args.results_out)
    return RunSettings(
        methods=args.method, partitions=args.partitions, batch_size=args.batch_size, window_kind=kind,
        window_size=float(size), bounds=tuple(bounds.as_tuple()), engine=args.engine,
        engine_options=engine_options(args) if args.engine == "core" else {}, merge_buckets=args.merge_buckets,
        n1=args.n1, sample_size=args.sample_size, thresholds=args.thresholds, engine_cache=args.engine_cache,
        host_idle_timeout=args.host_idle,
        stream_format=args.stream_format, events_format=args.events_format, sink=args.sink, source=args.source,
        messages_dir=args.messages_dir, commands_dir=args.commands_dir, kafka_bootstrap=args.kafka_bootstrap, events_topic=args.events_topic,
        messages_topic=args.messages_topic, commands_topic=args.commands_topic, trigger_seconds=args.trigger_seconds,
        stop_after_batches=args.stop_after_batches, timeout_s=args.timeout, rebalance=args.rebalance,
        rebalance_load=args.rebalance_load, summaries=args.summaries,
    )


def run_directory(args) -> Path:
    """The run directory as an absolute path: executors resolve a relative one against their own
    working directory (a standalone Worker's is its application folder), and would write the
    events and results there instead of into the directory the driver reads."""
    return Path(args.checkpoint or f"out/dskype-{time.strftime('%Y%m%d-%H%M%S')}").resolve()


def run_distributed(args: argparse.Namespace, spark=None) -> int:
    """Plan, run, report.  ``spark``: an existing session (the Spark app, tests); else one is made
    from ``--master``."""
    from skype import io
    from skype.spark import runtime

    if (args.messages_dir is None) != (args.commands_dir is None):
        raise InputError("E023", what="--messages-dir and --commands-dir", expected="given together",
                         value=args.messages_dir or args.commands_dir)
    run_dir = run_directory(args)
    t0 = time.perf_counter()
    from skype.dskype import kinds, rebalancing

    rebalancing.check_rebalance(args.rebalance, args.method, staged=not (args.vocabulary or args.messages_dir
                                                                         or args.source != "files"))
    # executor ingestion reads topk records (kinds come through staged inputs or a spec column)
    kind_of: dict[int, str] = {}
    vocabulary = None
    own = spark is None
    if args.vocabulary and args.source == "kafka":
        # the distribution from a sample of the topics: the session is needed to plan
        from skype.spark.ingest import plan_kafka_run

        settings = settings_from_args(args, args.bounds)
        if own:
            spark = runtime.make_session(args.master, driver_memory=args.driver_memory, extra=dict(args.conf))
        plan = plan_kafka_run(spark, run_dir, settings, vocabulary=args.vocabulary)
        description = f"topics {args.messages_topic}, {args.commands_topic} (executor ingestion)"
    elif args.vocabulary:
        # executors read and tokenize the raw streams: the driver loads samples only
        from skype.spark.ingest import plan_ingest_run

        check_ingest_args(args)
        settings = settings_from_args(args, args.bounds)
        settings.ingest_split = args.ingest_split
        plan = plan_ingest_run(run_dir, settings, vocabulary=args.vocabulary, messages_file=args.messages,
                               subscriptions_file=args.subscriptions)
        description = f"{args.messages or args.messages_dir} (executor ingestion)"
    else:
        inputs = load_inputs(args)
        # range/knn/terms and until: skype.dskype.kinds (what each method serves; refusals E048)
        kinds.refuse(inputs, args.method, open_end=bool(args.source != "files" or args.messages_dir
                                                        or args.stop_after_batches or args.timeout))
        kind_of, vocabulary = kinds.kind_map(inputs), inputs.vocabulary
        settings = settings_from_args(args, inputs.bounds)
        settings.engine_options.update(kinds.engine_options(inputs) if args.engine == "core" else {})
        plan = runtime.plan_run(run_dir, settings, inputs)
        plan.rebalancers = rebalancing.attach(plan, args.rebalance, inputs, settings.rebalance_load)
        description = inputs.description
    t_plan = time.perf_counter() - t0
    if spark is None:
        spark = runtime.make_session(args.master, driver_memory=args.driver_memory, extra=dict(args.conf))
    several = len(plan.pipelines) > 1
    runs = []
    try:
        outcome = runtime.run_query(spark, plan)
        for pipe in plan.pipelines:
            metrics = runtime.run_metrics(plan, outcome, pipe)
            metrics.update(input=description, plan_s=t_plan, run_dir=str(run_dir),
                           master=spark.conf.get("spark.master", ""))
            metrics.update(rebalancing.rebalancing_report(plan, outcome, pipe))
            if args.results_out:
                runtime.check_results_visible(plan, pipe, metrics.get("result_events", 0))
                results = runtime.final_results(plan, pipe)
                metrics["subscriptions"] = io.write_objects(per_method(args.results_out, pipe.method, several),
                                                            kinds.result_objects(results, kind_of, vocabulary))
                metrics["results_from"] = "stages" if runtime.stage_result_files(plan, pipe) else "events"
            runs.append(metrics)
    finally:
        if own:
            spark.stop()
    if args.metrics_out:
        out = runs[0] if not several else {"runs": runs}
        out = dict(out, machine=machine_info())
        Path(args.metrics_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.metrics_out).write_text(json.dumps(out, indent=2, default=float) + "\n")
    for metrics in runs:
        print_table(f"distributed: {metrics['method']}", _rows(metrics, settings, run_dir, plan.resumed), file=sys.stdout)
    return 0


def _rows(metrics: dict, settings, run_dir, resumed: bool) -> list[tuple[str, object]]:
    rows = [
        ("input", metrics["input"]), ("method", f"{metrics['method']}, P = {settings.partitions}"),
        ("window", metrics["window"]), ("master", metrics["master"]), ("run directory", run_dir),
        ("batches", f"{metrics['batches']} of {settings.batch_size} messages" + (" (resumed)" if resumed else "")),
        ("messages", metrics["messages"]),
        ("throughput (msgs/s)", f"{metrics['throughput_msgs_per_s']:,.0f} in batches, "
                                f"{metrics['wall_throughput_msgs_per_s']:,.0f} wall"),
        ("batch latency p50 / p99 (ms)", f"{metrics['batch_latency_ms_p50']:,.0f} / {metrics['batch_latency_ms_p99']:,.0f}"),
        ("communication per message", f"{metrics['communication_per_message']:.2f}"
                                      + (f" (+ {metrics['backfill_per_message']:.2f} read back, "
                                         f"{metrics['backfill_rebuilds']} rebuilds)"
                                         if metrics.get("backfill_per_message") else "")),
        ("replication ratio", f"{metrics['replication_ratio']:.2f}"),
        ("load imbalance (max/mean)", f"{metrics['load_imbalance']:.2f}"),
        ("cache hit rate (steady)", f"{metrics['cache_hit_rate']:.1%} ({metrics['cache_hit_rate_steady']:.1%})"),
        ("state bytes written / batch", f"{metrics['state_bytes_written_per_batch']:,.0f}"),
        ("result events", metrics["result_events"]),
        ("routing closure / tables (bytes)", f"{metrics['routing_bytes']:,} / {metrics['routing_table_bytes']:,}"),
        ("driver peak RSS (MB)", f"{metrics['driver_peak_rss_bytes'] / 2**20:,.0f}"),
        ("dead letters", metrics["dead_letters"]),
    ]
    if "moves" in metrics:
        rows.append(("rebalancing", f"{metrics['rebalance_policy']}: {metrics['moves']} moves, "
                                    f"{metrics['subscriptions_moved']} subscriptions, "
                                    f"{metrics['state_bytes_moved']:,} state bytes"))
    if metrics.get("stopped_early"):
        rows.append(("stopped", "early: run again with the same --checkpoint to resume"))
    return rows


def check_ingest_args(args: argparse.Namespace) -> None:
    """``--vocabulary``: raw files (``--messages`` with ``--subscriptions``) or raw directories."""
    if args.events:
        raise InputError("E023", what="--events", expected="left out with --vocabulary (give --messages and "
                                                           "--subscriptions, or the stream directories)",
                         value=args.events)
    files, dirs = bool(args.messages), bool(args.messages_dir)
    if files == dirs or (files and not args.subscriptions) or (dirs and args.subscriptions):
        raise InputError("E023", what="--vocabulary", expected="given with --messages and --subscriptions files, or "
                                                               "with --messages-dir and --commands-dir",
                         value=args.vocabulary)
    if args.ingest_split < 1:
        raise InputError("E023", what="--ingest-split", expected="an integer >= 1", value=args.ingest_split)


def cmd_distributed(args: argparse.Namespace) -> int:
    return run_distributed(args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("distributed", help="run DSkype on Apache Spark (needs the spark extra)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(p)
    add_engine_args(p)
    add_distributed_args(p)
    p.set_defaults(func=cmd_distributed)
