"""Event fan-out: a bounded ring of recent events and the listeners of each subscription.

Runs on the event loop only.  ``publish`` appends each event (serialized once) to the ring and
offers it to the listeners of its subscription.  The ring holds the newest ``retain`` events,
whose ``seq`` are consecutive, so a resume after seq ``a`` is exact from the ring when
``oldest - 1 <= a <= last_seq``; other resumes need a ``reset`` first (the caller asks the engine
for the current results and resumes from the seq they correspond to).  ``recent`` indexes the
ring per subscription, so attaching costs the followed subscriptions' backlog, not the ring.

Each listener has a bounded queue of live events: an event that finds it full marks the
listener ``overflowed`` and the stream is closed with the last seq it delivered, so a slow
consumer costs at most its queue's memory.  What a stream starts with (its backlog, at most the
queue's size, else resets: one per subscription) goes to ``pending``, sent before the queue and
never cut, so a consumer cut off always gets its whole backlog on the next try: it makes
progress however slow it is.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Callable, Iterable


CUT = (-1, -1, "", None)  # what Listener.next answers once a slow consumer must be closed with E103


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
        self.ring: deque[tuple[int, int]] = deque()  # (seq, sub) of the retained events, oldest first
        self.recent: dict[int, deque[tuple[int, str]]] = {}  # sub -> (seq, data) of its retained events
        self.by_sub: dict[int, set[Listener]] = {}
        self.last_seq = 0
        self.on_push = None  # callable(count) for metrics

    def publish(self, events: Iterable[dict], t0: float | None) -> None:
        for ev in events:
            data = json.dumps(ev, ensure_ascii=False, allow_nan=False)
            seq, sub = ev["seq"], ev["sub"]
            if self.retain > 0:
                if len(self.ring) >= self.retain:
                    _, old = self.ring.popleft()
                    mine = self.recent[old]
                    mine.popleft()  # the oldest of ``old``'s is the ring's oldest
                    if not mine:
                        del self.recent[old]
                self.ring.append((seq, sub))
                self.recent.setdefault(sub, deque()).append((seq, data))
            self.last_seq = seq
            item = (seq, sub, data, t0)
            for listener in self.by_sub.get(sub, ()):
                listener.offer(item)

    def start_at(self, seq: int) -> None:
        """Continue after ``seq``, the newest event of a restored snapshot (none of its events
        are retained): a resume after it needs no reset, one before it does."""
        if not self.ring:
            self.last_seq = max(self.last_seq, seq)

    def covers(self, after: int) -> bool:
        """True when every event with seq > ``after`` is still in the ring (or yet to come)."""
        oldest = self.ring[0][0] if self.ring else self.last_seq + 1
        return after >= oldest - 1

    def attach(self, listener: Listener, subs: Iterable[int], after: int, limit: int | None = None) -> bool:
        """Put the retained events of ``subs`` after ``after`` in the listener's ``pending``,
        then follow them live (the caller checked :meth:`covers`; both happen in one loop turn,
        so nothing falls between).  When they are more than ``limit``, attach nothing and
        return False (the caller sends resets instead).  Costs the backlog, at most ``limit``."""
        new = set(subs) - listener.subs
        backlog: list[tuple[int, int, str]] = []
        for sub in new:
            for seq, data in reversed(self.recent.get(sub, ())):
                if seq <= after:
                    break
                backlog.append((seq, sub, data))
                if limit is not None and len(backlog) > limit:
                    return False
        backlog.sort()
        listener.pending.extend((seq, sub, data, None) for seq, sub, data in backlog)
        listener.ready.set()
        for sub in new:
            self.by_sub.setdefault(sub, set()).add(listener)
        listener.subs |= new
        return True

    def detach(self, listener: Listener) -> None:
        for sub in listener.subs:
            group = self.by_sub.get(sub)
            if group is not None:
                group.discard(listener)
                if not group:
                    del self.by_sub[sub]
        listener.subs = set()
