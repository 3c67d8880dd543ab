"""``python -m skype.run distributed``: DSkype on Apache Spark (Structured Streaming).

Loads the workload like ``simulate`` (same options), writes it as stream files into the run
directory (``--checkpoint``), builds the distribution (``--method`` over ``--partitions``
subscription partitions), and streams it through Spark in micro-batches of ``--batch-size``
messages: routing, one stateful engine per partition on the executors, an exact merge of
replicated subscriptions, result-change events to ``DIR/events``.  The final top-k goes to
``--results-out`` (the same JSONL as ``simulate --results-out``), the answers of snapshot
queries to ``--answers-out`` (as ``simulate --answers-out``; ``docs/queries.md``), metrics to
``--metrics-out``.

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
from pathlib import Path

from skype.cli.inputs import add_workload_args, load_inputs, window_of
from skype.cli.report import machine_info, print_table
from skype.cli.simulate import add_engine_args, engine_options
from skype.partitioning import ADAPTIVE_METHODS, STATIC_METHODS
from skype.partitioning.rebalance import POLICIES
from skype.partitioning.ranges import CUTS
from skype.errors import InputError
from skype.spark.job import RawStreams, default_run_directory
from skype.workload import Inputs

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
    d.add_argument("--rebalance-stats", choices=("auto", "replay", "reports"), default="auto",
                   help="where the policy's statistics come from: the driver's replay of a staged stream, or the "
                        "partitions' reports in their metrics rows (auto: replay when the driver staged the stream, "
                        "else reports; docs/spark-design.md, 'Live rebalancing')")
    d.add_argument("--summaries", choices=("active", "hosted", "off"), default="active",
                   help="prefix on a count window: keyword summaries, a message goes to a partition only for its "
                        "terms some replica there holds; 'active': awake replicas (the paper's loose prefixes), "
                        "'hosted': every hosted record, 'off': every term (default: %(default)s; "
                        "docs/spark-design.md, 'Keyword summaries')")
    d.add_argument("--partitions", type=int, default=2, help="subscription partitions P (default: %(default)s)")
    d.add_argument("--merge-buckets", type=int, help="merge-stage keys (default: P)")
    d.add_argument("--n1", type=int, help="outer partitions of a hybrid (a divisor of P)")
    d.add_argument("--range-cut", choices=CUTS, default="balanced",
                   help="term ranges of keyword, prefix and the hybrids: 'balanced' makes the largest range's "
                        "work on the sample (postings scanned, messages received) the least possible, 'bisection' "
                        "is the paper's Algorithm 4 (default: %(default)s)")
    d.add_argument("--sample-size", type=int, default=10_000,
                   help="first messages used as the distribution's cost sample (default: %(default)s)")
    d.add_argument("--thresholds", choices=("auto", "core", "reference", "kscore", "none"), default="auto",
                   help="engine estimating theta_s for the prefix cost model (default: %(default)s)")
    s = p.add_argument_group("spark")
    if master:
        s.add_argument("--master", default="local[*]", help="Spark master (default: %(default)s)")
        s.add_argument("--driver-memory", default=None,
                       help="driver memory (default: in local mode a quarter of the machine's memory, 1g-8g; else 1g)")
    s.add_argument("--batch-size", type=int, default=10_000, help="messages per micro-batch (default: %(default)s)")
    s.add_argument("--commands-per-batch", type=int, metavar="N",
                   help="subscription commands per micro-batch, at most (default: from the driver memory; 0: no cap)")
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
    o.add_argument("--answers-out", metavar="FILE",
                   help="the answers of the snapshot queries ({\"op\": \"query\"} events) as JSONL, as simulate "
                        "writes them (docs/queries.md)")
    o.add_argument("--metrics-out", metavar="FILE", help="run metrics as JSON")
    o.add_argument("--sink", choices=("files", "console", "kafka"), default="files",
                   help="result-change events to DIR/events (default), the console, or the Kafka topic "
                        "--events-topic at --kafka-bootstrap (sent by the executors; at-least-once)")
    o.add_argument("--events-topic", metavar="TOPIC", help="with --sink kafka: the topic of the events")
    o.add_argument("--events-format", choices=("json", "parquet"), default="parquet",
                   help="format of DIR/events (default: %(default)s)")


def settings_from_args(args: argparse.Namespace, bounds):
    from skype.dskype.plan import RunSettings

    window = window_of(args)
    kind, size = ("count", window["window"]) if "window" in window else ("time", window["window_seconds"])
    return RunSettings(
        methods=args.method, partitions=args.partitions, batch_size=args.batch_size, window_kind=kind,
        window_size=float(size), bounds=tuple(bounds.as_tuple()), engine=args.engine,
        engine_options=engine_options(args) if args.engine == "core" else {}, merge_buckets=args.merge_buckets,
        n1=args.n1, range_cut=args.range_cut, sample_size=args.sample_size, thresholds=args.thresholds, engine_cache=args.engine_cache,
        host_idle_timeout=args.host_idle,
        stream_format=args.stream_format, events_format=args.events_format, sink=args.sink, source=args.source,
        messages_dir=args.messages_dir, commands_dir=args.commands_dir, kafka_bootstrap=args.kafka_bootstrap, events_topic=args.events_topic,
        messages_topic=args.messages_topic, commands_topic=args.commands_topic, trigger_seconds=args.trigger_seconds,
        stop_after_batches=args.stop_after_batches, timeout_s=args.timeout, rebalance=args.rebalance,
        rebalance_load=args.rebalance_load, rebalance_stats=args.rebalance_stats, summaries=args.summaries,
        ingest_split=args.ingest_split if args.vocabulary else 10_000,
        commands_per_batch=args.commands_per_batch,
    )


def run_directory(args) -> Path:
    """The run directory as an absolute path: executors resolve a relative one against their own
    working directory (a standalone Worker's is its application folder), and would write the
    events and results there instead of into the directory the driver reads."""
    return Path(args.checkpoint).resolve() if args.checkpoint else default_run_directory()


def run_distributed(args: argparse.Namespace, spark=None) -> int:
    """Parse the options into settings and a workload, :func:`skype.spark.run` them, report.
    ``spark``: an existing session (the Spark app, tests); else one is made from ``--master``."""
    from skype import spark as dskype_on_spark
    from skype.dskype import rebalancing

    # refusals that need no workload, before it is loaded (skype.spark.run checks them again)
    rebalancing.check_rebalance(args.rebalance, args.method, staged=not (args.vocabulary or args.messages_dir
                                                                         or args.source != "files"),
                                versioned=args.source == "files")
    workload: Inputs | RawStreams
    if args.vocabulary:
        check_ingest_args(args)
        workload = RawStreams(args.vocabulary, args.messages, args.subscriptions)
        bounds = args.bounds
    else:
        workload = load_inputs(args)
        bounds = workload.bounds
    settings = settings_from_args(args, bounds)
    run_dir = run_directory(args)
    out = dskype_on_spark.run(settings, workload, spark, run_dir=run_dir, results_out=args.results_out,
                              answers_out=args.answers_out,
                              master=getattr(args, "master", "local[*]"),
                              driver_memory=getattr(args, "driver_memory", None), conf=dict(args.conf))
    if args.metrics_out:
        Path(args.metrics_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.metrics_out).write_text(json.dumps(dict(out, machine=machine_info()), indent=2, default=float) + "\n")
    for metrics in out.get("runs", [out]):
        print_table(f"distributed: {metrics['method']}", _rows(metrics, settings, run_dir, metrics["resumed"]),
                    file=sys.stdout)
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
    """``--vocabulary``: raw files (``--messages`` with ``--subscriptions``) or raw directories
    (checked by :meth:`skype.spark.job.RawStreams.check`), never ``--events``."""
    if args.events:
        raise InputError("E023", what="--events", expected="left out with --vocabulary (give --messages and "
                                                           "--subscriptions, or the stream directories)",
                         value=args.events)


def cmd_distributed(args: argparse.Namespace) -> int:
    return run_distributed(args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("distributed", help="run DSkype on Apache Spark (needs the spark extra)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(p)
    add_engine_args(p)
    add_distributed_args(p)
    p.set_defaults(func=cmd_distributed)
