"""Event fan-out: a bounded ring of recent events and the listeners of each subscription.

Runs on the event loop only.  ``publish`` appends each event (serialized once) to the ring and
offers it to the listeners of its subscription.  The ring holds the newest ``retain`` events,
whose ``seq`` are consecutive, so a resume after seq ``a`` is exact from the ring when
``a >= oldest - 1``; older resumes need a ``reset`` first (the caller asks the engine for the
current results and resumes from the seq they correspond to).  Each listener has a bounded
queue: an event that finds it full marks the listener ``overflowed`` and the stream is closed
with the last seq it delivered, so a slow consumer costs at most its queue's memory.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Callable, Iterable


class Listener:
    """One event stream (an SSE response or a WebSocket): its subscriptions and queue."""

    def __init__(self, maxsize: int) -> None:
        self.queue: asyncio.Queue = asyncio.Queue(maxsize)
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


class Hub:
    def __init__(self, retain: int) -> None:
        self.ring: deque[tuple[int, int, str]] = deque(maxlen=retain)  # (seq, sub, data)
        self.by_sub: dict[int, set[Listener]] = {}
        self.last_seq = 0
        self.on_push = None  # callable(count) for metrics

    def publish(self, events: Iterable[dict], t0: float | None) -> None:
        for ev in events:
            data = json.dumps(ev, ensure_ascii=False, allow_nan=False)
            item = (ev["seq"], ev["sub"], data, t0)
            self.ring.append(item[:3])
            self.last_seq = ev["seq"]
            for listener in self.by_sub.get(ev["sub"], ()):
                listener.offer(item)

    def covers(self, after: int) -> bool:
        """True when every event with seq > ``after`` is still in the ring."""
        oldest = self.ring[0][0] if self.ring else self.last_seq + 1
        return after >= oldest - 1

    def attach(self, listener: Listener, subs: Iterable[int], after: int) -> None:
        """Queue the retained events of ``subs`` after ``after``, then follow them live (the
        caller checked :meth:`covers`; both happen in one loop turn, so nothing falls between)."""
        new = set(subs) - listener.subs
        for seq, sub, data in self.ring:
            if seq > after and sub in new:
                listener.offer((seq, sub, data, None))
        for sub in new:
            self.by_sub.setdefault(sub, set()).add(listener)
        listener.subs |= new

    def detach(self, listener: Listener) -> None:
        for sub in listener.subs:
            group = self.by_sub.get(sub)
            if group is not None:
                group.discard(listener)
                if not group:
                    del self.by_sub[sub]
        listener.subs = set()
