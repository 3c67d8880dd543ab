"""``python -m skype.run serve``: the engine as a live HTTP service (``skype.service``).

Listens on ``--host``/``--port`` (loopback only unless ``--token-file`` is given), keeps its
write-ahead log and snapshots in ``--data-dir``, and serves the API of issue 24 (README "Live
service", ``docs/service.md``).  SIGTERM or Ctrl-C: stop accepting, write a snapshot, exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from skype.cli.inputs import bounds_arg
from skype.cli.simulate import add_engine_args, engine_options
from skype.errors import InputError
from skype.model import DEFAULT_BOUNDS


def _settings(args: argparse.Namespace, vocabulary) -> dict:
    return {"window": args.window, "window_seconds": args.window_seconds, "bounds": str(args.bounds),
            "engine": args.engine, "vocabulary": vocabulary.key.hex() if vocabulary is not None else None}


def check_data_dir(args: argparse.Namespace, vocabulary=None) -> Path:
    """Create the data directory, or check it was made with the same window, bounds, engine and
    vocabulary."""
    path = Path(args.data_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError("E102", path=str(path), detail=str(err)) from None
    settings_file = path / "settings.json"
    now = _settings(args, vocabulary)
    if settings_file.exists():
        first = json.loads(settings_file.read_text())
        if first != now:
            diff = ", ".join(f"{k}: {first.get(k)!r} then {now[k]!r}" for k in now if first.get(k) != now[k])
            raise InputError("E102", path=str(path), detail=f"it was created with other settings ({diff})")
    else:
        from skype.service.wal import write_atomic

        write_atomic(settings_file, json.dumps(now).encode())
    return path


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from skype.service.app import Limits, Service
    from skype.service.auth import Tokens, check_host
    from skype.service.hub import Hub
    from skype.service.metrics import Metrics
    from skype.service.state import State
    from skype.service.worker import Worker

    tokens = Tokens.load(args.token_file) if args.token_file else None
    check_host(args.host, tokens)
    vocabulary = None
    if args.vocabulary:
        from skype.dskype.vocabulary import FrozenVocabulary  # the file's format and ids

        vocabulary = FrozenVocabulary.load(args.vocabulary)
    data_dir = check_data_dir(args, vocabulary)
    window = {"window": args.window} if args.window is not None else {"window_seconds": args.window_seconds}

    def make_engine(vocabulary):
        if args.engine == "reference":
            from skype.reference import ReferenceEngine

            return ReferenceEngine(bounds=args.bounds, vocabulary=vocabulary, **window)
        from skype.engine import Engine

        return Engine(bounds=args.bounds, vocabulary=vocabulary, snapshots=True, **engine_options(args), **window)

    metrics = Metrics()
    hub = Hub(args.retain_events)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    state = State(make_engine, vocabulary, ingest=args.ingest, max_records=args.max_records)

    def refuse_to_start(err: BaseException) -> None:  # a damaged log (E140): exit, changing nothing
        raise web.GracefulExit()

    worker = Worker(data_dir, state, fsync=args.fsync, queue_size=args.queue_size,
                    snapshot_every=args.snapshot_every, snapshot_seconds=args.snapshot_seconds, metrics=metrics,
                    loop=loop, publish=hub.publish, start_at=hub.start_at, on_failure=refuse_to_start)
    limits = Limits(args.max_body_bytes, args.max_records, args.max_connections, args.max_streams_per_connection,
                    args.stream_queue)
    service = Service(worker, hub, tokens, limits, metrics)
    app = service.app()

    async def start_worker(app: web.Application) -> None:
        worker.start()

    async def stop_worker(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, worker.stop)

    app.on_startup.append(start_worker)
    app.on_cleanup.append(stop_worker)
    print(f"skype serve: listening on http://{args.host}:{args.port} (data in {data_dir})", file=sys.stderr,
          flush=True)
    web.run_app(app, host=args.host, port=args.port, shutdown_timeout=3.0, print=None, loop=loop,
                access_log=None, handle_signals=True)
    if isinstance(worker.recovery_error, InputError):
        raise worker.recovery_error
    return 0 if worker.recovery_error is None else 1


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
    s = p.add_argument_group("service")
    s.add_argument("--token-file", metavar="FILE",
                   help='JSON {"admin": [tokens], "publisher": [tokens]}; without it, loopback only and no auth')
    s.add_argument("--fsync", choices=("always", "batch", "never"), default="batch",
                   help="log durability before an acknowledgement: fsync per write, one fsync per group of "
                        "writes (default), or none (the OS's page cache only)")
    s.add_argument("--ingest", choices=("columnar", "records"), default="columnar",
                   help="how NDJSON message batches are read: decoded and validated by columns (default), or "
                        "record by record in Python (the first design, kept to compare)")
    s.add_argument("--queue-size", type=int, default=1024, help="engine jobs waiting before 429 (default: %(default)s)")
    s.add_argument("--max-body-bytes", type=int, default=16 << 20, help="request body limit (default: 16 MiB)")
    s.add_argument("--max-records", type=int, default=100_000, help="records per request (default: %(default)s)")
    s.add_argument("--max-connections", type=int, default=2048,
                   help="open requests and event streams together (default: %(default)s)")
    s.add_argument("--max-streams-per-connection", type=int, default=1000,
                   help="subscriptions one WebSocket may follow (default: %(default)s)")
    s.add_argument("--stream-queue", type=int, default=4096,
                   help="events buffered per stream before a slow consumer is disconnected (default: %(default)s)")
    s.add_argument("--retain-events", type=int, default=100_000,
                   help="recent events kept for resuming streams (default: %(default)s)")
    s.add_argument("--snapshot-every", type=int, default=20_000,
                   help="snapshot after N written records: messages, subscription changes, advances "
                        "(default: %(default)s)")
    s.add_argument("--snapshot-seconds", type=float, default=300.0,
                   help="snapshot after T seconds with writes (default: %(default)s)")
    p.set_defaults(func=cmd_serve)
