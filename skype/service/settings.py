"""The service's settings: everything ``python -m skype.run serve`` takes, as one dataclass.

A leaf module (it imports nothing of the service), so that the constructor
(:mod:`~skype.service.build`), the engine seam (:mod:`~skype.service.backend`) and the backends can
all name the settings without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skype.model import DEFAULT_BOUNDS, Bounds

QUERY_WINDOWS = ("lazy", "eager")
ENGINES = ("core", "reference", "spark")  # spark: DSkype on Spark (skype.service.spark_backend, skype.service.backend)


@dataclass
class ServiceSettings:
    """Everything ``python -m skype.run serve`` takes (its options, by the same names; see
    ``docs/service.md``).  Exactly one of ``window`` and ``window_seconds``."""

    data_dir: str | Path
    window: int | None = None
    window_seconds: float | None = None
    host: str = "127.0.0.1"
    port: int = 8750
    bounds: Bounds | tuple[float, float, float, float] = DEFAULT_BOUNDS
    engine: str = "core"                      # "core" (skype.Engine), "reference" (brute force) or "spark"
    engine_options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of skype.Engine
    # (spark: master, method, partitions, trigger_ms; skype.service.spark_backend.spark_options)
    vocabulary: str | None = None             # a vocabulary file (python -m skype.run vocabulary)
    token_file: str | None = None             # None: no tokens, loopback only
    allow_origins: tuple[str, ...] = ()       # browser origins besides the server's own that may write
    fsync: str = "batch"
    ingest: str = "columnar"
    queue_size: int = 1024
    max_body_bytes: int = 16 << 20
    max_records: int = 100_000
    max_connections: int = 2048
    max_streams_per_connection: int = 1000
    stream_queue: int = 4096
    stream_buffer_bytes: int = 4 << 20
    retain_events: int = 100_000
    retain_seconds: float | None = None
    snapshot_every: int = 20_000
    snapshot_seconds: float = 300.0
    queries: str = "lazy"                     # the query window: "lazy" (kept from the first snapshot query or
    # subscription of another kind than topk on, built from the window then) or "eager" (from the start)

    def __post_init__(self) -> None:
        if not isinstance(self.bounds, Bounds):
            self.bounds = Bounds(*self.bounds)
        if self.engine not in ENGINES:
            from skype.errors import invalid_choice

            raise invalid_choice("engine", self.engine, ENGINES)
        if self.queries not in QUERY_WINDOWS:
            from skype.errors import invalid_choice

            raise invalid_choice("queries", self.queries, QUERY_WINDOWS)
        self.allow_origins = tuple(self.allow_origins)
