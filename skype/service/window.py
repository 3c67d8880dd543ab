"""The records of the messages in the engine's window, kept as the batches that brought them.

The service needs the window's message records for snapshots (they are replayed into a new
engine) and for ``GET /v1/messages``.  Design 1 kept one dict per message (about 1 KB each);
here a batch stays as it came: its NDJSON body (bytes, one object) with the byte offset of each
record, or, for the record-by-record path, its list of records, plus numpy columns of ids and
timestamps, and the :class:`~skype.model.MessageBatch` the engine was given (a snapshot stores
its columns, so that a restore publishes them as they are).  Invariant: the chunks hold exactly the engine's window, oldest first: a count
window its newest ``window`` messages, a time window the messages with ``t > clock - T`` (the
rule of ``skype.reference``, exact at the boundary), so :meth:`WindowRecords.__len__` is the
window's size at no cost.  Messages leave the window oldest first, so trimming drops whole
chunks and moves the first chunk's start.
"""

from __future__ import annotations

import json
from collections import deque
from fractions import Fraction
from typing import Iterator

import numpy as np

from skype.model import MessageBatch


class Chunk:
    __slots__ = ("ids", "t", "raw", "starts", "recs", "batch", "first")

    def __init__(self, ids: np.ndarray, t: np.ndarray, raw: bytes | None, starts: np.ndarray | None,
                 recs: list[dict] | None, batch: MessageBatch | None = None) -> None:
        self.ids, self.t, self.raw, self.starts, self.recs = ids, t, raw, starts, recs
        self.batch = batch  # the batch as the engine was given it (a snapshot's columns), or None
        self.first = 0  # rows before this one have left the window

    def __len__(self) -> int:
        return len(self.ids) - self.first

    def record(self, i: int) -> dict:
        """Row ``i``'s record with its timestamp (design 1 filled in a missing one)."""
        if self.recs is not None:
            rec = dict(self.recs[i])
        else:
            assert self.raw is not None and self.starts is not None
            end = int(self.starts[i + 1]) if i + 1 < len(self.starts) else len(self.raw)
            rec = json.loads(self.raw[int(self.starts[i]):end])
        rec["t"] = float(self.t[i])
        return rec

    def nbytes(self) -> int:
        raw = len(self.raw) if self.raw is not None else 0
        starts = self.starts.nbytes if self.starts is not None else 0
        b = self.batch  # its ids and t are the arrays above
        batch = 0 if b is None else b.x.nbytes + b.y.nbytes + b.terms.indptr.nbytes + b.terms.ids.nbytes \
            + b.terms.weights.nbytes
        return self.ids.nbytes + self.t.nbytes + raw + starts + batch


def _expired(tm: float, clock: float, seconds: float) -> bool:
    return Fraction(tm) <= Fraction(clock) - Fraction(seconds)


class WindowRecords:
    def __init__(self, window: int | None, window_seconds: float | None) -> None:
        self.window, self.window_seconds = window, window_seconds
        self.chunks: deque[Chunk] = deque()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, ids: np.ndarray, t: np.ndarray, *, raw: bytes | None = None, starts: np.ndarray | None = None,
            recs: list[dict] | None = None, batch: MessageBatch | None = None) -> None:
        self.chunks.append(Chunk(ids, t, raw, starts, recs, batch))
        self.size += len(ids)

    def trim(self, clock: float) -> None:
        """Drop what left the engine's window (see the module docstring)."""
        if self.window is not None:
            excess = self.size - self.window
            while excess > 0:
                head = self.chunks[0]
                if len(head) <= excess:
                    self.chunks.popleft()
                    excess -= len(head)
                    self.size -= len(head)
                else:
                    head.first += excess
                    self.size -= excess
                    excess = 0
            return
        if self.window_seconds is None or not np.isfinite(clock):
            return
        seconds = self.window_seconds
        while self.chunks:
            head = self.chunks[0]
            t = head.t
            i = int(np.searchsorted(t, clock - seconds, side="right"))  # about; exact below
            while i > head.first and not _expired(float(t[i - 1]), clock, seconds):
                i -= 1
            while i < len(t) and _expired(float(t[i]), clock, seconds):
                i += 1
            i = max(i, head.first)
            self.size -= i - head.first
            head.first = i
            if i < len(t):
                break
            self.chunks.popleft()

    def rows(self) -> Iterator[tuple[Chunk, int]]:
        for chunk in self.chunks:
            for i in range(chunk.first, len(chunk.ids)):
                yield chunk, i

    def columns(self) -> tuple[np.ndarray, np.ndarray, list]:
        """The window as columns for a snapshot: ids, timestamps and each record's JSON text
        (binary Arrow arrays over the batches' bodies: no Python object per message)."""
        import pyarrow as pa

        ids = [c.ids[c.first:] for c in self.chunks]
        ts = [c.t[c.first:] for c in self.chunks]
        texts = []
        for c in self.chunks:
            if c.recs is not None:
                texts.append(pa.array([json.dumps(r).encode() for r in c.recs[c.first:]], pa.binary()))
                continue
            assert c.raw is not None and c.starts is not None
            starts = c.starts[c.first:]
            offsets = np.r_[starts, len(c.raw)] - starts[0]  # a record runs to the next one's start
            data = c.raw[int(starts[0]):]
            texts.append(pa.Array.from_buffers(pa.large_binary(), len(starts),
                                               [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)]))
        empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
        return (np.concatenate(ids) if ids else empty_i, np.concatenate(ts) if ts else empty_f,
                [t.cast(pa.large_binary()) for t in texts])

    def batch(self) -> MessageBatch | None:
        """The window's messages as the engine holds them (ids, places, times, term ids and
        weights), oldest first, for a snapshot that a restore publishes without decoding a text
        or looking a term up; None when a chunk has no batch."""
        parts: list[MessageBatch] = []
        for c in self.chunks:
            if c.batch is None:
                return None
            parts.append(c.batch if c.first == 0 else c.batch.slice(c.first, len(c.ids)))
        return MessageBatch.concat(parts)

    def records(self) -> list[tuple[int, float, dict]]:
        """(id, t, record) of every message in the window, oldest first."""
        return [(int(c.ids[i]), float(c.t[i]), c.record(i)) for c, i in self.rows()]

    def newest(self, n: int) -> list[dict]:
        """The records of the newest ``n`` messages, oldest first."""
        out: list[dict] = []
        for chunk in reversed(self.chunks):
            for i in range(len(chunk.ids) - 1, chunk.first - 1, -1):
                if len(out) == n:
                    break
                out.append(chunk.record(i))
            if len(out) == n:
                break
        out.reverse()
        return out

    def find(self, ids: list[int]) -> list[dict]:
        """The records of the window messages with these ids, oldest first (ids not in the window
        are left out)."""
        wanted = np.asarray(ids, np.int64)
        out: list[dict] = []
        for chunk in self.chunks:
            hits = np.flatnonzero(np.isin(chunk.ids[chunk.first:], wanted)) + chunk.first
            out.extend(chunk.record(int(i)) for i in hits)
        return out

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.chunks)
