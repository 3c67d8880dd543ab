"""Skype as a live service (issue 24): ``python -m skype.run serve``.

Stack: aiohttp (server, WebSocket and streaming responses in one well-kept package, with its
own client for tests of other projects) rather than Starlette on uvicorn with ``websockets``
(three packages for the same routes).  Measured on this machine for a trivial JSON endpoint,
see the branch report / docs/results.md; the engine thread, not the HTTP layer, bounds
throughput, so the smaller dependency set decided.

Modules: :mod:`~skype.service.app` (routes, auth, limits, streams), :mod:`~skype.service.worker`
(the single engine thread, group commit), :mod:`~skype.service.state` (commands to engine calls
and events), :mod:`~skype.service.hub` (event ring and fan-out), :mod:`~skype.service.wal` (the
checksummed log), :mod:`~skype.service.snapshot` (Parquet snapshots),
:mod:`~skype.service.auth` and :mod:`~skype.service.metrics`.
"""
