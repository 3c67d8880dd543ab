"""A partition's view of the sliding window: the window's definition and the partition's share.

:class:`WindowSpec` is a count window of N messages or a time window of T seconds, as engine
times: a count window runs as a time window over ``t := seq`` (the global sequence number), so
when the clock reads ``s`` it holds the messages with ``seq`` in ``(s - N, s]``, the last N of
the global stream, although a partition sees only part of it.  :class:`WindowShare` holds the
window messages routed to one partition, one chunk per batch: a batch costs its own size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skype.errors import InputError


@dataclass(frozen=True)
class WindowSpec:
    """``kind`` is ``"count"`` (``size`` messages) or ``"time"`` (``size`` seconds)."""

    kind: str
    size: float

    def __post_init__(self) -> None:
        if self.kind not in ("count", "time") or not (self.size > 0 and math.isfinite(self.size)):
            raise InputError("E023", what="window", expected="a count or time window of positive size",
                             value=(self.kind, self.size))

    @classmethod
    def of(cls, window: int | None = None, window_seconds: float | None = None) -> WindowSpec:
        if window is not None:
            return cls("count", float(window))
        if window_seconds is None:
            raise ValueError("a window needs a count or a duration")
        return cls("time", float(window_seconds))

    def clock(self, hwm_seq: int, hwm_t: float) -> float:
        return float(hwm_seq) if self.kind == "count" else float(hwm_t)

    def engine_times(self, seq: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The timestamps partition engines see: ``seq`` for count windows, ``t`` otherwise."""
        return np.asarray(seq, np.float64) if self.kind == "count" else np.asarray(t, np.float64)

    def live(self, times: np.ndarray, clock: float) -> np.ndarray:
        """Which engine times are still in the window when the clock reads ``clock``."""
        return np.asarray(times, np.float64) > clock - self.size

    def centralized(self) -> dict:
        """The centralized engine's window argument."""
        return {"window": int(self.size)} if self.kind == "count" else {"window_seconds": self.size}


class WindowShare:
    """The window messages routed to this partition, in ``seq`` order, as one chunk per batch, each
    with its own id -> seq lookup (sorted once, when the chunk arrives).  A batch costs its own
    size: appending sorts only the new chunk, expiry drops whole chunks (and cuts the oldest one),
    a lookup searches the few live chunks; nothing is concatenated or re-sorted over the window."""

    def __init__(self) -> None:
        self.chunks: list[list[np.ndarray]] = []  # [ids, seq, times, sorted ids, their seq]
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def ids(self) -> np.ndarray:
        return np.concatenate([c[0] for c in self.chunks]) if self.chunks else np.zeros(0, np.int64)

    def seqs(self) -> np.ndarray:
        """Sequence numbers of the share's messages (ascending)."""
        return np.concatenate([c[1] for c in self.chunks]) if self.chunks else np.zeros(0, np.int64)

    def append(self, ids: np.ndarray, seq: np.ndarray, times: np.ndarray) -> None:
        if len(ids) == 0:
            return
        ids, seq = np.asarray(ids, np.int64), np.asarray(seq, np.int64)
        order = np.argsort(ids, kind="stable")
        self.chunks.append([ids, seq, np.asarray(times, np.float64), ids[order], seq[order]])
        self._len += len(ids)

    def expire(self, spec: WindowSpec, clock: float) -> None:
        while self.chunks:
            ids, seq, times = self.chunks[0][:3]
            keep = spec.live(times, clock)
            if keep.all():
                return
            if not keep.any():
                self.chunks.pop(0)
                self._len -= len(ids)
                continue
            first = int(np.argmax(keep))  # times ascend: a prefix expires
            ids, seq, times = ids[first:], seq[first:], times[first:]
            order = np.argsort(ids, kind="stable")
            self.chunks[0] = [ids, seq, times, ids[order], seq[order]]
            self._len -= first
            return

    def seq_of(self, ids: np.ndarray) -> np.ndarray:
        """Sequence numbers of window message ids (every id must be in the window)."""
        ids = np.asarray(ids, np.int64)
        out = np.full(len(ids), -1, np.int64)
        todo = np.arange(len(ids))
        for chunk in reversed(self.chunks):  # the newest chunk holds most top-k entries
            if len(todo) == 0:
                break
            sid, sseq = chunk[3], chunk[4]
            pos = np.searchsorted(sid, ids[todo]).clip(0, len(sid) - 1)
            hit = sid[pos] == ids[todo]
            out[todo[hit]] = sseq[pos[hit]]
            todo = todo[~hit]
        if len(todo):
            raise InputError("E026", detail="a top-k entry is not in the partition's window share")
        return out
