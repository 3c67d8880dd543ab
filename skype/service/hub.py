"""The event ring: the recent events of every subscription, and exact resumes from it.

Runs on the event loop only.  ``publish`` appends each command's :class:`EventBlock` (columns,
not objects: see :mod:`skype.service.events`) to the ring and hands it to the fan-out
(:mod:`skype.service.fanout`), which writes the followed events to the connections.

Retention: the ring holds at most ``retain`` events (the oldest block may be partly dropped) and,
with ``retain_seconds``, none older than that (whole blocks, by the time the hub received them).
Their ``seq`` are consecutive.

Resume watermarks, per subscription.  Evicting events records, per subscription, the newest seq
of its that left the ring (``last_evicted``, updated with one vectorised pass per evicted slice).
A resume of subscription ``s`` after seq ``a`` is exact from the ring if and only if
``last_evicted[s] <= a`` (no event of ``s`` newer than ``a`` was dropped), ``a >= floor`` (the
events up to ``floor``, before the restored snapshot, were never in this ring) and ``a <=
last_seq``.  So a quiet subscription resumes exactly however old its last event is; only a
subscription whose own events were dropped needs a ``reset`` (the caller asks the engine for the
current results, waits with :meth:`reach` until the ring has the events up to the seq they
correspond to, and resumes from there).  :meth:`gap` names the reason (``evicted``,
``restart``, ``ahead``), counted in the metrics.

Finding a backlog looks for the followed subscriptions in the blocks newer than ``a`` with one
vectorised membership test per block.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Callable, Iterable

import numpy as np

from skype.service.events import EventBlock

MERGE = 1024  # consecutive small blocks (one event per subscription change) merge up to this size


class Hub:
    def __init__(self, retain: int, retain_seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.retain, self.retain_seconds, self.clock = retain, retain_seconds, clock
        self.ring: deque[EventBlock] = deque()  # the retained events, oldest first, as blocks
        self.retained = 0  # events in the ring
        self.last_seq = 0
        self.floor = 0  # events up to this seq were never retained here (before a restored snapshot)
        self.last_evicted: dict[int, int] = {}  # subscription -> its newest seq dropped from the ring
        self.fanout: Any = None  # skype.service.fanout.Fanout, told of every block
        self._waiters: list[tuple[int, asyncio.Future]] = []

    def publish(self, events: Iterable[EventBlock | dict], t0: float | None) -> None:
        """Retain and fan out event blocks (event objects are grouped into blocks first)."""
        now = self.clock()
        for block in _blocks(events):
            block.born = now
            if self.retain > 0:
                last = self.ring[-1] if self.ring else None
                if (last is not None and len(block) < MERGE and len(last) < MERGE and last.position == block.position
                        and last.last_seq + 1 == block.seq0):
                    merged = EventBlock.concat(last, block)  # one-off events: few, larger blocks
                    merged.born = now
                    self.ring[-1] = merged
                else:
                    self.ring.append(block)
                self.retained += len(block)
            else:
                self._evict(block, 0, len(block))
            self.last_seq = block.last_seq
            if self.fanout is not None:
                self.fanout.deliver(block, t0)
        self.trim(now)
        if self._waiters:
            ready = [fut for seq, fut in self._waiters if seq <= self.last_seq]
            self._waiters = [(seq, fut) for seq, fut in self._waiters if seq > self.last_seq]
            for fut in ready:
                if not fut.done():
                    fut.set_result(None)

    async def reach(self, seq: int) -> None:
        """Return once every event up to ``seq`` has been published here (the engine may be a
        few blocks ahead of the loop)."""
        if seq <= self.last_seq:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, fut))
        await fut

    # ------------------------------------------------------------------ retention
    def trim(self, now: float | None = None) -> None:
        """Drop events beyond ``retain`` and blocks older than ``retain_seconds``."""
        excess = self.retained - self.retain
        while excess > 0:
            head = self.ring[0]
            left = len(head) - head.first
            if left <= excess:
                self._evict(head, head.first, len(head))
                self.ring.popleft()
                self.retained -= left
                excess -= left
            else:
                self._evict(head, head.first, head.first + excess)
                head.first += excess
                self.retained -= excess
                excess = 0
        if self.retain_seconds is not None:
            oldest = (self.clock() if now is None else now) - self.retain_seconds
            while self.ring and self.ring[0].born < oldest:
                head = self.ring.popleft()
                self._evict(head, head.first, len(head))
                self.retained -= len(head) - head.first

    def _evict(self, block: EventBlock, lo: int, hi: int) -> None:
        """Record each subscription's newest seq among events ``lo:hi`` of ``block``."""
        if hi <= lo:
            return
        subs = block.subs[lo:hi][::-1]
        uniq, first = np.unique(subs, return_index=True)  # the first in reverse: the newest
        seqs = block.seq0 + hi - 1 - first
        self.last_evicted.update(zip(uniq.tolist(), seqs.tolist()))

    def start_at(self, seq: int) -> None:
        """Continue after ``seq``, the newest event of a restored snapshot (none of its events
        are retained): a resume after it needs no reset, one before it does."""
        if not self.ring:
            self.last_seq = max(self.last_seq, seq)
            self.floor = max(self.floor, seq)

    # ------------------------------------------------------------------ resumes
    def gap(self, subs: Iterable[int], after: int) -> str | None:
        """None when every event of ``subs`` after ``after`` is in the ring (or yet to come);
        else why not: ``ahead`` (after the newest seq), ``restart`` (before the restored
        snapshot), ``evicted`` (an event of one of them newer than ``after`` was dropped)."""
        if after > self.last_seq:
            return "ahead"
        if after < self.floor:
            return "restart"
        last_evicted = self.last_evicted
        if any(last_evicted.get(s, 0) > after for s in subs):
            return "evicted"
        return None

    def covers(self, after: int) -> bool:
        """True when every event with seq > ``after``, of any subscription, is in the ring."""
        oldest = self.ring[0].seq0 + self.ring[0].first if self.ring else self.last_seq + 1
        return after >= oldest - 1 and after >= self.floor

    def backlog(self, subs: Iterable[int], after: int, limit: int | None = None) -> list[tuple[EventBlock, list[int]]] | None:
        """The retained events of ``subs`` after ``after``, oldest first, as (block, event
        indices); None when they are more than ``limit``.  The caller checked :meth:`gap`."""
        wanted = np.fromiter(set(subs), np.int64)
        found: list[tuple[EventBlock, list[int]]] = []
        count = 0
        for block in reversed(self.ring):
            if block.last_seq <= after:
                break
            lo = max(block.first, after - block.seq0 + 1)
            hits = np.flatnonzero(np.isin(block.subs[lo:], wanted)) + lo
            if len(hits):
                found.append((block, hits.tolist()))
                count += len(hits)
                if limit is not None and count > limit:
                    return None
        found.reverse()
        return found

    def retained_events(self) -> list[tuple[int, int]]:
        """(seq, sub) of every retained event, oldest first."""
        return [(b.seq0 + i, int(b.subs[i])) for b in self.ring for i in range(b.first, len(b))]

    def nbytes(self) -> int:
        return sum(b.nbytes() for b in self.ring)


def _blocks(events: Iterable[EventBlock | dict]) -> Iterable[EventBlock]:
    """Blocks as they are; runs of consecutive event objects as one block each."""
    run: list[dict] = []
    for ev in events:
        if isinstance(ev, EventBlock):
            if run:
                yield EventBlock.from_objects(run)
                run = []
            yield ev
        else:
            if run and ev["seq"] != run[-1]["seq"] + 1:
                yield EventBlock.from_objects(run)
                run = []
            run.append(ev)
    if run:
        yield EventBlock.from_objects(run)
