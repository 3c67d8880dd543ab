"""``python -m skype.run serve``: the engine as a live HTTP service (``skype.service``).

Listens on ``--host``/``--port`` (loopback only unless ``--token-file`` is given), keeps its
write-ahead log and snapshots in ``--data-dir``, and serves the API of issue 24 (README "Live
service", ``docs/service.md``).  SIGTERM or Ctrl-C: stop accepting, write a snapshot, exit.
"""

from __future__ import annotations

import argparse

from skype.cli.inputs import bounds_arg
from skype.cli.simulate import add_engine_args, engine_options
from skype.model import DEFAULT_BOUNDS


def settings_of(args: argparse.Namespace):
    """The :class:`~skype.service.build.ServiceSettings` of the parsed arguments."""
    from skype.service.settings import ServiceSettings

    return ServiceSettings(
        data_dir=args.data_dir, window=args.window, window_seconds=args.window_seconds, host=args.host,
        port=args.port, bounds=args.bounds, engine=args.engine,
        engine_options=spark_options(args) if args.engine == "spark" else engine_options(args),
        vocabulary=args.vocabulary, token_file=args.token_file, allow_origins=tuple(args.allow_origin),
        fsync=args.fsync, ingest=args.ingest, queue_size=args.queue_size, max_body_bytes=args.max_body_bytes,
        max_records=args.max_records, max_connections=args.max_connections,
        max_streams_per_connection=args.max_streams_per_connection, stream_queue=args.stream_queue,
        stream_buffer_bytes=args.stream_buffer_bytes, retain_events=args.retain_events,
        retain_seconds=args.retain_seconds, snapshot_every=args.snapshot_every,
        snapshot_seconds=args.snapshot_seconds, queries=args.queries)


def spark_options(args: argparse.Namespace) -> dict:
    """The options of ``--engine spark`` (``skype.service.spark_backend.spark_options`` checks them)."""
    return {"master": args.master, "method": args.method, "partitions": args.partitions, "trigger_ms": args.trigger_ms,
            "query_timeout_s": args.query_timeout_s}


def cmd_serve(args: argparse.Namespace) -> int:
    from skype.service.build import serve

    return serve(settings_of(args))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the engine as a live HTTP service",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, metavar="DIR", help="write-ahead log and snapshots")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8750, help="port (default: %(default)s)")
    w = p.add_argument_group("window and space")
    ex = w.add_mutually_exclusive_group(required=True)
    ex.add_argument("--window", type=int, help="count window of N messages")
    ex.add_argument("--window-seconds", type=float, help="time window of T seconds")
    w.add_argument("--vocabulary", metavar="FILE",
                   help="weigh text with this vocabulary file (python -m skype.run vocabulary), as simulate "
                        "--vocabulary does; default: no sample, every term weighs the same idf")
    w.add_argument("--bounds", type=bounds_arg, default=DEFAULT_BOUNDS, metavar="MINX,MINY,MAXX,MAXY",
                   help="space bounds (default: -180,-90,180,90)")
    add_engine_args(p)
    for action in p._actions:  # serve also runs over DSkype on Spark
        if action.dest == "engine":
            action.choices = (*(action.choices or ()), "spark")
            action.help = "the Cython core (default), the brute-force reference, or DSkype on Spark (docs/service.md)"
    sp = p.add_argument_group("--engine spark (DSkype on Spark; docs/service-spark.md)")
    sp.add_argument("--master", default=None, help="Spark master URL (default: local[2])")
    sp.add_argument("--method", default=None, help="distribution method (default: location)")
    sp.add_argument("--partitions", type=int, default=None, help="subscription partitions (default: 2)")
    sp.add_argument("--trigger-ms", type=int, default=None, help="milliseconds between micro-batches (default: 500)")
    sp.add_argument("--query-timeout-s", type=int, default=None,
                    help="seconds a snapshot query waits for the batch that answers it (default: 120; then E139)")
    s = p.add_argument_group("service")
    s.add_argument("--token-file", metavar="FILE",
                   help='JSON {"admin": [tokens], "publisher": [tokens]}; without it, loopback only and no auth')
    s.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="a browser origin (scheme://host[:port]) besides the server's own whose pages may write "
                        "and open event streams; repeatable (default: none)")
    s.add_argument("--fsync", choices=("always", "batch", "never"), default="batch",
                   help="log durability before an acknowledgement: fsync per write, one fsync per group of "
                        "writes (default), or none (the OS's page cache only)")
    s.add_argument("--ingest", choices=("columnar", "records"), default="columnar",
                   help="how NDJSON message batches are read: decoded and validated by columns (default), or "
                        "record by record in Python (a bench switch: the record path is the fallback that "
                        "names a refused batch's errors, and the columns' oracle in the tests)")
    s.add_argument("--queue-size", type=int, default=1024, help="engine jobs waiting before 429 (default: %(default)s)")
    s.add_argument("--max-body-bytes", type=int, default=16 << 20, help="request body limit (default: 16 MiB)")
    s.add_argument("--max-records", type=int, default=100_000, help="records per request (default: %(default)s)")
    s.add_argument("--max-connections", type=int, default=2048,
                   help="open requests and event streams together (default: %(default)s)")
    s.add_argument("--max-streams-per-connection", type=int, default=1000,
                   help="subscriptions one WebSocket may follow (default: %(default)s)")
    s.add_argument("--stream-queue", type=int, default=4096,
                   help="events a resuming stream is replayed at most; more: resets (default: %(default)s)")
    s.add_argument("--stream-buffer-bytes", type=int, default=4 << 20,
                   help="bytes a stream may leave unsent before it is cut as a slow consumer (default: 4 MiB)")
    s.add_argument("--retain-events", type=int, default=100_000,
                   help="recent events kept for resuming streams (default: %(default)s)")
    s.add_argument("--retain-seconds", type=float, default=None,
                   help="also drop retained events older than this (default: kept by count only)")
    s.add_argument("--snapshot-every", type=int, default=20_000,
                   help="snapshot after N written records: messages, subscription changes, advances "
                        "(default: %(default)s)")
    s.add_argument("--snapshot-seconds", type=float, default=300.0,
                   help="snapshot after T seconds with writes (default: %(default)s)")
    s.add_argument("--queries", choices=("lazy", "eager"), default="lazy",
                   help="the query window (snapshot queries, the range, knn and terms kinds): kept from the "
                        "first command that needs it on, built from the window then (lazy), or from the "
                        "start (eager) (default: %(default)s)")
    p.set_defaults(func=cmd_serve)
