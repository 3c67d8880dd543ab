"""Reading window messages back from the message stream, by position (keyword summaries).

A ``prefix`` partition whose summary gains a term needs the window messages holding it that were
not routed to it (:mod:`skype.dskype.summaries`).  No process keeps the whole window, but the stream
does: a file source's offset is the number of records consumed, so position p is record p of
the files in name order.  :class:`BackfillSource` reads positions ``[lo, hi)`` with the readers
the streaming sources use (staged files, or raw files tokenized with the shipped vocabulary,
:mod:`skype.spark.ingest`), and screens them as the router does (:func:`skype.dskype.screening.screen`),
so what comes back is exactly what routing would have sent.  A Kafka stream is not read back
(no consumer per partition task): summaries stay off there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from skype.spark.readers import StreamFilesReader


@dataclass(frozen=True)
class BackfillSource:
    """Where a partition reads window messages back: the message stream's directory, staged
    (``StreamFilesReader``) or raw with the shipped vocabulary (``RawFilesReader``)."""

    path: str
    bounds: tuple
    raw: bool = False
    vocabulary: str | None = None
    claims: str | None = None
    split: int = 10_000

    def read(self, lo: int, hi: int):
        """Messages at positions ``[lo, hi)`` as the router sees them (records the engine rejects
        left out): ``(MessageBatch, seq)``."""
        from skype.dskype import codec
        from skype.dskype.codec import Commands
        from skype.dskype.routing import events_from_arrow
        from skype.dskype.screening import screen

        if hi <= lo:
            return codec.empty_messages(), np.zeros(0, np.int64)
        reader = _readers.get(self)
        if reader is None:
            reader = _readers[self] = self._reader()
        if hi > reader._refresh():
            from skype.errors import InputError

            raise InputError("E026", detail=f"the message stream has no position {hi - 1} to backfill from")
        parts = []
        for piece in reader.partitions({"records": lo}, {"records": hi}):
            for batch in reader.read(piece):
                messages, seq, _ = events_from_arrow(batch)
                messages, seq, _, _ = screen(messages, seq, Commands.empty(), self.bounds)
                parts.append((messages, seq))
        return codec.concat_messages(parts)

    def _reader(self) -> StreamFilesReader:
        if not self.raw:
            from skype.spark.readers import StreamFilesReader

            return StreamFilesReader(self.path, "messages", None)
        from skype.spark.readers import RawFilesReader

        return RawFilesReader(self.path, "messages", None, vocabulary=str(self.vocabulary), claims=self.claims,
                              bounds=self.bounds, dead_letters=None, split=self.split, default_at=None)


_readers: dict[BackfillSource, StreamFilesReader] = {}  # per process: the file list of each stream, counted once
