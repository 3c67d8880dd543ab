"""The service's engine seam: where ``serve --engine`` chooses what runs the commands.

The service (routes, log, worker, event hub, fan-out) is the same for every engine.  What an
engine must give it is one :class:`~skype.service.state.State`: ``apply`` a validated, logged
command; the results; snapshot queries.  ``core`` and ``reference`` are a ``State`` over an
in-process engine and need nothing more.  Another engine is an :class:`EngineBackend`: it makes
the state (``make_state``), is handed the assembled service (``attach``: its worker, hub and
metrics), and runs beside the application (``start`` with it, ``stop`` at its cleanup).  The one
other backend today is DSkype on Spark (:mod:`skype.service.spark_backend`), imported here only when asked
for, so pyspark stays an extra.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from skype.service.app import Service
    from skype.service.settings import ServiceSettings
    from skype.service.state import State


class EngineBackend(Protocol):
    def make_state(self, vocabulary: Any, ingest: str, max_records: int) -> State: ...

    def attach(self, service: Service) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def backend_of(settings: ServiceSettings, data_dir: Path, loop: asyncio.AbstractEventLoop) -> EngineBackend | None:
    """The backend of ``settings.engine``; None for the in-process engines (``core``, ``reference``)."""
    if settings.engine == "spark":
        from skype.service.spark_backend import SparkBackend  # its driver process is the only part that imports pyspark

        return SparkBackend(settings, data_dir, loop)
    return None


def backend_of_service(service: Service) -> EngineBackend | None:
    """The backend a service was built with (None: an in-process engine)."""
    return getattr(service.worker.state, "backend", None)
