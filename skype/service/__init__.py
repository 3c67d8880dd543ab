"""Skype as a live service (issue 24): ``python -m skype.run serve``.

Stack: aiohttp, chosen by measurement over Starlette on uvicorn with ``websockets``.  A trivial
JSON endpoint, 2,000 sequential keep-alive requests from one client, best of 3 on this shared
2-core machine (``bench/service_stack.py``, indicative; two runs): aiohttp 865 and 789 req/s,
Starlette on uvicorn (h11, no uvloop) 557 and 714 req/s.  aiohttp also serves HTTP, streaming responses (SSE) and WebSocket
from one well-kept package, where the other stack needs three; the engine thread, not the HTTP
layer, bounds the service's throughput, so the faster and smaller stack decided.

Log: an append-only file of checksummed records (:mod:`~skype.service.wal`) rather than SQLite
in WAL mode: made durable per commit, both are bound by fsync; the file log measured 297 vs 252
commits/s for small records and 231 vs 215 for batches of 1,000 messages
(``bench/service_log_compare.py``, indicative), and it needs no schema, while group commit
(``--fsync batch``) amortizes the fsync over every write waiting in the queue.

Library entry point: ``create_app(ServiceSettings(data_dir=..., window=...))`` builds the wired
aiohttp application (:mod:`~skype.service.build`); ``serve(settings)`` runs it, as the CLI does.

Modules: :mod:`~skype.service.build` (settings and wiring), :mod:`~skype.service.app` (routes, auth,
limits, streams), :mod:`~skype.service.guard` (Host, Origin and Content-Type checks),
:mod:`~skype.service.bulk` (bulk and paginated routes), :mod:`~skype.service.worker`
(the single engine thread, group commit), :mod:`~skype.service.state` (commands to engine calls
and events), :mod:`~skype.service.ingest` (an NDJSON batch decoded and validated by columns),
:mod:`~skype.service.events` (a write's events as columns), :mod:`~skype.service.window` (the
window's records as the batches' bodies), :mod:`~skype.service.hub` (the event ring, resume
watermarks), :mod:`~skype.service.fanout` (events encoded once, one write per stream per block),
:mod:`~skype.service.wal` (the checksummed log), :mod:`~skype.service.snapshot` (Parquet
snapshots), :mod:`~skype.service.auth` and :mod:`~skype.service.metrics`.

Message batches: design 2 (columnar decode and checks, events kept as columns and serialised only
when a stream sends them) replaced design 1 (a dict per record and per event); ``--ingest
records`` keeps design 1's record-by-record validation to compare (``docs/service.md``).
"""

from skype.service.build import build_service, create_app, serve
from skype.service.settings import ServiceSettings

__all__ = ["ServiceSettings", "build_service", "create_app", "serve"]
