"""The service's constructor: :class:`ServiceSettings` in, a wired aiohttp application out.

``create_app(settings)`` is the one place that assembles the service: the tokens (and the
loopback-only rule without them), the data directory (created, or checked against the settings
it was made with), the engine factory, the state, the engine thread (:mod:`~skype.service.worker`),
the event hub, the request guard (:mod:`~skype.service.guard`) and the routes
(:mod:`~skype.service.app`).  ``python -m skype.run serve`` only turns its arguments into a
:class:`ServiceSettings` and calls :func:`serve`; tests and embedders call :func:`create_app`
(or :func:`build_service` for a service whose engine thread they start themselves).

Invariant: the engine thread hands its results to the loop the application runs on, so
``create_app`` must be called on that loop (inside a coroutine), or be given it (``loop=``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Callable

from skype.errors import InputError
from skype.service.settings import ServiceSettings

def _recorded_settings(settings: ServiceSettings, vocabulary: Any) -> dict:
    """What a data directory remembers of the settings it was made with (``settings.json``)."""
    return {"window": settings.window, "window_seconds": settings.window_seconds, "bounds": str(settings.bounds),
            "engine": settings.engine, "vocabulary": vocabulary.key.hex() if vocabulary is not None else None}


def check_data_dir(settings: ServiceSettings, vocabulary: Any = None) -> Path:
    """Create the data directory (mode 0700: it holds the log), or check it was made with the same
    window, bounds, engine and vocabulary.  ``settings.json`` is written whole or not at all."""
    path = Path(settings.data_dir)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise InputError("E102", path=str(path), detail=str(err)) from None
    settings_file = path / "settings.json"
    now = _recorded_settings(settings, vocabulary)
    if settings_file.exists():
        first = json.loads(settings_file.read_text())
        if first != now:
            diff = ", ".join(f"{k}: {first.get(k)!r} then {now[k]!r}" for k in now if first.get(k) != now[k])
            raise InputError("E102", path=str(path), detail=f"it was created with other settings ({diff})")
    else:
        from skype.service.wal import write_atomic

        write_atomic(settings_file, json.dumps(now).encode())
    return path


def engine_factory(settings: ServiceSettings) -> Callable[[Any], Any]:
    """``make_engine(vocabulary)`` for the state (a new engine at start and at each restore)."""
    window = {"window": settings.window} if settings.window is not None else \
        {"window_seconds": settings.window_seconds}

    def make_engine(vocabulary):
        if settings.engine == "reference":
            from skype.reference import ReferenceEngine

            return ReferenceEngine(bounds=settings.bounds, vocabulary=vocabulary, **window)
        from skype.engine import Engine

        return Engine(bounds=settings.bounds, vocabulary=vocabulary, snapshots=settings.queries == "eager",
                      **settings.engine_options,
                      **window)
    return make_engine


def build_service(settings: ServiceSettings, loop: asyncio.AbstractEventLoop | None = None,
                  on_failure: Callable[[BaseException], None] | None = None):
    """The :class:`~skype.service.app.Service` of ``settings``, its engine thread not started
    (``create_app`` starts it with the application).  ``loop``: the loop it will run on
    (default: the running loop).  ``on_failure(err)``: called on that loop when recovery fails
    (a damaged log, E140), having changed nothing."""
    from skype.service.app import Limits, Service
    from skype.service.auth import Tokens, check_host
    from skype.service.backend import backend_of
    from skype.service.guard import Guard
    from skype.service.hub import Hub
    from skype.service.metrics import Metrics
    from skype.service.state import State
    from skype.service.worker import Worker

    tokens = Tokens.load(settings.token_file) if settings.token_file else None
    check_host(settings.host, tokens)
    vocabulary = None
    if settings.vocabulary:
        from skype.dskype.vocabulary import FrozenVocabulary  # the file's format and ids

        vocabulary = FrozenVocabulary.load(settings.vocabulary)
    data_dir = check_data_dir(settings, vocabulary)
    loop = loop or asyncio.get_running_loop()
    metrics = Metrics()
    hub = Hub(settings.retain_events, retain_seconds=settings.retain_seconds)
    backend = backend_of(settings, data_dir, loop)
    state = State(engine_factory(settings), vocabulary, ingest=settings.ingest, max_records=settings.max_records) \
        if backend is None else backend.make_state(vocabulary, settings.ingest, settings.max_records)
    worker = Worker(data_dir, state, fsync=settings.fsync, queue_size=settings.queue_size,
                    snapshot_every=settings.snapshot_every, snapshot_seconds=settings.snapshot_seconds,
                    metrics=metrics, loop=loop, publish=hub.publish, start_at=hub.start_at, on_failure=on_failure)
    limits = Limits(settings.max_body_bytes, settings.max_records, settings.max_connections,
                    settings.max_streams_per_connection, settings.stream_queue, settings.stream_buffer_bytes)
    guard = Guard(settings.host, settings.port, tokenless=tokens is None, allow_origins=settings.allow_origins)
    service = Service(worker, hub, tokens, limits, metrics, guard=guard)
    if backend is not None:
        backend.attach(service)
    return service


def create_app(settings: ServiceSettings, loop: asyncio.AbstractEventLoop | None = None,
               on_failure: Callable[[BaseException], None] | None = None):
    """The aiohttp application of ``settings``: routes, guard and limits; the engine thread
    starts (recovering the data directory) with the application and stops, after a last
    snapshot, with its cleanup.  ``app[SERVICE]`` is the :class:`~skype.service.app.Service`;
    ``on_failure`` as :func:`build_service` (without it, a failed recovery leaves the service
    answering 503 ``failed``)."""
    from aiohttp import web

    from skype.service.app import SERVICE
    from skype.service.backend import backend_of_service

    service = build_service(settings, loop, on_failure)
    app = service.app()
    app[SERVICE] = service
    backend = backend_of_service(service)

    async def start_worker(app: web.Application) -> None:
        service.worker.start()
        if backend is not None:
            await backend.start()

    async def stop_worker(app: web.Application) -> None:
        if backend is not None:
            await backend.stop()
        await asyncio.get_running_loop().run_in_executor(None, service.worker.stop)

    app.on_startup.append(start_worker)
    app.on_cleanup.append(stop_worker)
    return app


def serve(settings: ServiceSettings) -> int:
    """Run the service of ``settings`` until SIGTERM or Ctrl-C (then a last snapshot); the exit
    status.  A failed recovery stops it at once, having changed nothing: a catalogue error (a
    damaged log, E140) is raised, anything else exits 1."""
    from aiohttp import web

    from skype.service.app import SERVICE

    def refuse_to_start(err: BaseException) -> None:
        raise web.GracefulExit()

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    app = create_app(settings, loop, on_failure=refuse_to_start)
    print(f"skype serve: listening on http://{settings.host}:{settings.port} (data in {settings.data_dir})",
          file=sys.stderr, flush=True)
    web.run_app(app, host=settings.host, port=settings.port, shutdown_timeout=3.0, print=None, loop=loop,
                access_log=None, handle_signals=True)
    error = app[SERVICE].worker.recovery_error
    if isinstance(error, InputError):
        raise error
    return 0 if error is None else 1
