"""Event fan-out: a bounded ring of recent events and the listeners of each subscription.

Runs on the event loop only.  ``publish`` appends each command's :class:`EventBlock` (columns,
not objects: see :mod:`skype.service.events`) to the ring and offers the events whose
subscription somebody follows to those listeners, as items ``(seq, sub, (block, i), t0)``: an
event is serialised only when a stream sends it.  The ring holds exactly the newest ``retain``
events (the oldest block may be partly dropped), whose ``seq`` are consecutive, so a resume after
seq ``a`` is exact from the ring when ``oldest - 1 <= a <= last_seq``; other resumes need a
``reset`` first (the caller asks the engine for the current results and resumes from the seq they
correspond to).  Attaching looks for the followed subscriptions in the blocks newer than ``a``
with one vectorised membership test per block.

Each listener has a bounded queue of live events: an event that finds it full marks the
listener ``overflowed`` and the stream is closed with the last seq it delivered, so a slow
consumer costs at most its queue's memory.  What a stream starts with (its backlog, at most the
queue's size, else resets: one per subscription) goes to ``pending``, sent before the queue and
never cut, so a consumer cut off always gets its whole backlog on the next try: it makes
progress however slow it is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Callable, Iterable

import numpy as np

from skype.service.events import EventBlock


CUT = (-1, -1, "", None)
MERGE = 1024  # consecutive small blocks (one event per subscription change) merge up to this size  # what Listener.next answers once a slow consumer must be closed with E103


class Listener:
    """One event stream (an SSE response or a WebSocket): its subscriptions and queue."""

    def __init__(self, maxsize: int) -> None:
        self.queue: asyncio.Queue = asyncio.Queue(maxsize)
        self.pending: deque[tuple] = deque()  # backlog or resets, sent first, never cut
        self.ready = asyncio.Event()  # set when there may be something to send
        self.subs: set[int] = set()
        self.overflowed = False
        self.last_seq = 0  # the last seq delivered to the client
        self.last: dict[int, int] = {}  # per subscription: the last seq delivered (no duplicates)
        self.on_overflow: Callable[[], None] | None = None  # e.g. a deadline to drop the connection

    def offer(self, item: tuple) -> None:
        if self.overflowed:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.overflowed = True
            if self.on_overflow is not None:
                self.on_overflow()
        self.ready.set()

    def prepend(self, items: list[tuple]) -> None:
        """Send ``items`` before everything else (a stream's backlog or resets)."""
        self.pending.extendleft(reversed(items))
        self.ready.set()

    async def next(self) -> tuple:
        """The next item to send: the pending ones first, then the queue's; :data:`CUT` once
        the queue overflowed (the rest of the queue is not sent: the client resumes after
        ``last_seq``)."""
        while True:
            if self.pending:
                return self.pending.popleft()
            if self.overflowed:
                return CUT
            if not self.queue.empty():
                return self.queue.get_nowait()
            self.ready.clear()
            await self.ready.wait()


class Hub:
    def __init__(self, retain: int) -> None:
        self.retain = retain
        self.ring: deque[EventBlock] = deque()  # the retained events, oldest first, as blocks
        self.retained = 0  # events in the ring
        self.by_sub: dict[int, set[Listener]] = {}
        self._followed: np.ndarray | None = None  # the keys of by_sub, as an array (None: stale)
        self.last_seq = 0
        self.on_push = None  # callable(count) for metrics

    def publish(self, events: Iterable[EventBlock | dict], t0: float | None) -> None:
        """Retain and fan out event blocks (event objects are grouped into blocks first)."""
        for block in _blocks(events):
            if self.retain > 0:
                last = self.ring[-1] if self.ring else None
                if (last is not None and len(block) < MERGE and len(last) < MERGE and last.position == block.position
                        and last.last_seq + 1 == block.seq0):
                    self.ring[-1] = EventBlock.concat(last, block)  # one-off events: few, larger blocks
                else:
                    self.ring.append(block)
                self.retained += len(block)
                self._trim()
            self.last_seq = block.last_seq
            if not self.by_sub:
                continue
            if self._followed is None:
                self._followed = np.fromiter(self.by_sub, np.int64, len(self.by_sub))
            subs = block.subs
            for i in np.flatnonzero(np.isin(subs, self._followed)).tolist():
                sub = int(subs[i])
                item = (block.seq0 + i, sub, (block, i), t0)
                for listener in self.by_sub.get(sub, ()):
                    listener.offer(item)

    def _trim(self) -> None:
        excess = self.retained - self.retain
        while excess > 0:
            head = self.ring[0]
            left = len(head) - head.first
            if left <= excess:
                self.ring.popleft()
                self.retained -= left
                excess -= left
            else:
                head.first += excess
                self.retained -= excess
                excess = 0

    def retained_events(self) -> list[tuple[int, int]]:
        """(seq, sub) of every retained event, oldest first."""
        return [(b.seq0 + i, int(b.subs[i])) for b in self.ring for i in range(b.first, len(b))]

    def start_at(self, seq: int) -> None:
        """Continue after ``seq``, the newest event of a restored snapshot (none of its events
        are retained): a resume after it needs no reset, one before it does."""
        if not self.ring:
            self.last_seq = max(self.last_seq, seq)

    def covers(self, after: int) -> bool:
        """True when every event with seq > ``after`` is still in the ring (or yet to come)."""
        oldest = self.ring[0].seq0 + self.ring[0].first if self.ring else self.last_seq + 1
        return after >= oldest - 1

    def attach(self, listener: Listener, subs: Iterable[int], after: int, limit: int | None = None) -> bool:
        """Put the retained events of ``subs`` after ``after`` in the listener's ``pending``,
        then follow them live (the caller checked :meth:`covers`; both happen in one loop turn,
        so nothing falls between).  When they are more than ``limit``, attach nothing and
        return False (the caller sends resets instead).  Costs one vectorised look per block
        newer than ``after``."""
        new = set(subs) - listener.subs
        wanted = np.fromiter(new, np.int64, len(new))
        backlog: list[tuple] = []
        for block in reversed(self.ring):
            if block.last_seq <= after:
                break
            lo = max(block.first, after - block.seq0 + 1)
            hits = np.flatnonzero(np.isin(block.subs[lo:], wanted)) + lo
            backlog.extend((block.seq0 + i, int(block.subs[i]), (block, i), None) for i in hits.tolist())
            if limit is not None and len(backlog) > limit:
                return False
        backlog.sort(key=lambda item: item[0])
        listener.pending.extend(backlog)
        listener.ready.set()
        for sub in new:
            self.by_sub.setdefault(sub, set()).add(listener)
        listener.subs |= new
        self._followed = None
        return True

    def detach(self, listener: Listener) -> None:
        for sub in listener.subs:
            group = self.by_sub.get(sub)
            if group is not None:
                group.discard(listener)
                if not group:
                    del self.by_sub[sub]
        listener.subs = set()
        self._followed = None

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
