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
when the command runs.  On a cluster use ``spark-submit skype/cli/spark_submit.py`` with the same
options (see ``docs/spark.md``).
"""

# This module only parses the options: skype.spark.job.run_options runs them (the docstring above
# is the command's --help).
from __future__ import annotations

import argparse
import sys

from skype.cli.inputs import add_workload_args
from skype.report import distributed_rows, print_table
from skype.cli.simulate import add_engine_args
from skype.partitioning import ADAPTIVE_METHODS, STATIC_METHODS
from skype.partitioning.rebalance import POLICIES
from skype.partitioning.ranges import CUTS

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
                        "else reports; docs/spark-rebalancing.md)")
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
                        "is the paper's Algorithm 4, 'work' also weighs the subscriptions a range holds (default: %(default)s)")
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


def run_distributed(args: argparse.Namespace, spark=None) -> int:
    """Run the parsed options (:func:`skype.spark.job.run_options`) and print a table per method.
    ``spark``: an existing session (the Spark app); else one is made from ``--master``."""
    from skype.spark.job import run_options

    settings, run_dir, out = run_options(vars(args), spark)
    for metrics in out.get("runs", [out]):
        print_table(f"distributed: {metrics['method']}", distributed_rows(metrics, settings, run_dir),
                    file=sys.stdout)
    return 0


def cmd_distributed(args: argparse.Namespace) -> int:
    return run_distributed(args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("distributed", help="run DSkype on Apache Spark (needs the spark extra)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(p)
    add_engine_args(p)
    add_distributed_args(p)
    p.set_defaults(func=cmd_distributed)
