"""Fan-out of event blocks to stream connections: encode once, one write per connection per block.

Runs on the event loop, called synchronously by the hub for each published block (no task,
queue or timer per event):

1. The block's followed events are found with one vectorised membership test against the
   followed subscriptions, and each is encoded once (:meth:`EventBlock.encode`, kept on the
   block); its SSE frame (``id: SEQ`` + ``data: JSON``) and its WebSocket frame (an unmasked
   text frame) are built at most once, and shared by every connection that follows its
   subscription.
2. Each connection's frames of the block are joined into one chunk and handed to its transport
   with one ``transport.write`` (SSE: one HTTP/1.1 chunk).  Within a connection, events are
   written in seq order (blocks come in seq order, a block's events are in seq order).
3. Backpressure is counted in bytes: a connection whose transport still buffers more than
   ``max_buffer_bytes`` when a block is for it is cut (slow consumer, E103): it is sent a
   closing message with ``last_seq``, the newest seq whose bytes it was given (they are flushed
   before the close, so the consumer resumes after it and loses nothing), and aborted if it
   has not drained within ``DROP_AFTER_S``.

One periodic timer (``tick``, every ``TICK_S``) sends keepalives to the connections idle for
``keepalive_s``: on SSE ``id: <newest seq>`` with a comment (EventSource then resumes from the
newest seq: every event up to it was written), on a WebSocket the watermark ``{"seq": n}`` (not
while a subscribe request of the connection is still being resolved); it
also notices closed transports, applies retention by age, and sets the lag gauges.

A connection is registered (``attach``) in the same loop turn as its backlog or resets are
written, so no event falls between; it is registered only when live, so a keepalive id never
runs ahead of what the connection was given.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from typing import Any, Callable

import numpy as np

from skype.errors import InputError
from skype.service.events import EventBlock

KEEPALIVE_S = 15.0
TICK_S = 1.0
DROP_AFTER_S = 5.0  # a cut connection that does not drain its closing message is aborted


def ws_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented WebSocket text frame (RFC 6455 5.2; server to client)."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 65536:
        return b"\x81\x7e" + struct.pack("!H", n) + payload
    return b"\x81\x7f" + struct.pack("!Q", n) + payload


def sse_frame(seq: int, payload: bytes) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (seq, payload)


class Connection:
    """One event stream: an SSE response or a WebSocket, written through its transport.

    ``kind`` is ``"sse"`` or ``"ws"``; ``chunked``: SSE over HTTP/1.1 chunked encoding (each
    write is one chunk).  ``done`` resolves when the stream is over (closed, cut, or, for SSE,
    every followed subscription removed); the handler then returns."""

    __slots__ = ("transport", "kind", "chunked", "subs", "last_seq", "last_write", "done", "cut",
                 "ends_when_removed", "on_cut", "following")

    def __init__(self, transport: Any, kind: str, *, chunked: bool = False,
                 ends_when_removed: bool = False) -> None:
        self.transport, self.kind, self.chunked = transport, kind, chunked
        self.subs: set[int] = set()
        self.last_seq = 0  # the newest seq whose bytes this connection was given
        self.last_write = time.monotonic()
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.cut = False
        self.ends_when_removed = ends_when_removed  # SSE: the stream ends with its last removal
        self.on_cut: Callable[[Connection], None] | None = None  # e.g. close a WebSocket with 1013
        self.following = 0  # subscribe requests still being resolved (resets): no watermark meanwhile

    def frame(self, seq: int, payload: bytes) -> bytes:
        return sse_frame(seq, payload) if self.kind == "sse" else ws_frame(payload)

    def write(self, data: bytes) -> bool:
        """Hand ``data`` to the transport as one write; False when the transport is closed."""
        transport = self.transport
        if transport is None or transport.is_closing():
            self.finish()
            return False
        if self.chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        transport.write(data)
        self.last_write = time.monotonic()
        return True

    def buffered(self) -> int:
        transport = self.transport
        return 0 if transport is None or transport.is_closing() else transport.get_write_buffer_size()

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class Fanout:
    def __init__(self, hub: Any, metrics: Any, *, max_buffer_bytes: int = 4 << 20,
                 keepalive_s: float = KEEPALIVE_S) -> None:
        self.hub, self.metrics = hub, metrics
        self.max_buffer_bytes, self.keepalive_s = max_buffer_bytes, keepalive_s
        self.by_sub: dict[int, set[Connection]] = {}
        self.connections: set[Connection] = set()
        self._followed: np.ndarray | None = None  # the keys of by_sub, as an array (None: stale)
        self._timer: asyncio.TimerHandle | None = None
        hub.fanout = self

    # ------------------------------------------------------------------ connections
    def attach(self, conn: Connection, subs: list[int], frames: list[bytes]) -> None:
        """Write ``frames`` (a backlog or resets, already in seq order) as one chunk, then
        follow ``subs`` live: both in this loop turn."""
        if frames:
            conn.write(b"".join(frames))
        for sub in subs:
            self.by_sub.setdefault(sub, set()).add(conn)
        conn.subs.update(subs)
        self.connections.add(conn)
        self._followed = None
        self.metrics.clients.set(len(self.connections))

    def detach(self, conn: Connection) -> None:
        for sub in conn.subs:
            group = self.by_sub.get(sub)
            if group is not None:
                group.discard(conn)
                if not group:
                    del self.by_sub[sub]
        conn.subs = set()
        self.connections.discard(conn)
        self._followed = None
        self.metrics.clients.set(len(self.connections))
        conn.finish()

    def frames(self, conn: Connection, found: list[tuple[EventBlock, list[int]]]) -> list[bytes]:
        """The frames of a backlog ((block, indices), oldest first) for ``conn``; its
        subscriptions removed in it are noted (see :meth:`_removed`)."""
        out = []
        for block, idx in found:
            for i, text in zip(idx, block.encode(idx)):
                out.append(conn.frame(block.seq0 + i, text))
            conn.last_seq = max(conn.last_seq, block.seq0 + idx[-1])
        return out

    # ------------------------------------------------------------------ the pipeline
    def deliver(self, block: EventBlock, t0: float | None) -> None:
        """Write the followed events of ``block`` to their connections (module docstring)."""
        if not self.by_sub:
            return
        if self._followed is None:
            self._followed = np.fromiter(self.by_sub, np.int64, len(self.by_sub))
        hits = np.flatnonzero(np.isin(block.subs, self._followed))
        if not len(hits):
            return
        idx = hits.tolist()
        texts = block.encode(idx)
        subs = block.subs[hits].tolist()
        removed = block.removed[hits].tolist()
        seq0 = block.seq0
        by_sub = self.by_sub
        touched: dict[Connection, list[int]] = {}
        for k, sub in enumerate(subs):
            for conn in by_sub.get(sub, ()):
                mine = touched.get(conn)
                if mine is None:
                    touched[conn] = [k]
                else:
                    mine.append(k)
        sse: list[bytes | None] = [None] * len(idx)
        ws: list[bytes | None] = [None] * len(idx)
        limit = self.max_buffer_bytes
        written = writes = 0
        ends: list[Connection] = []
        now = time.monotonic()
        for conn, ks in touched.items():
            if conn.buffered() > limit:
                self.cut(conn)
                continue
            shared = sse if conn.kind == "sse" else ws
            chunk = []
            for k in ks:
                frame = shared[k]
                if frame is None:
                    frame = shared[k] = conn.frame(seq0 + idx[k], texts[k])
                chunk.append(frame)
            if not conn.write(b"".join(chunk)):
                ends.append(conn)
                continue
            conn.last_seq = seq0 + idx[ks[-1]]
            written += len(ks)
            writes += 1
            if t0 is not None:
                self.metrics.publish_to_write.observe(now - t0, len(ks))
            if conn.ends_when_removed and any(removed[k] for k in ks):
                gone = {subs[k] for k in ks if removed[k]}
                conn.subs -= gone
                for sub in gone:
                    group = by_sub.get(sub)
                    if group is not None:
                        group.discard(conn)
                        if not group:
                            del by_sub[sub]
                self._followed = None
                if not conn.subs:
                    ends.append(conn)
        for conn in ends:
            self.detach(conn)
        if written:
            self.metrics.events_pushed.inc(written)
            self.metrics.stream_writes.inc(writes)
        self.metrics.blocks_delivered.inc()

    def cut(self, conn: Connection) -> None:
        """Close a slow consumer with its last seq (E103), after the bytes it was given."""
        if conn.cut:
            return
        conn.cut = True
        self.metrics.slow_consumers.inc()
        self.detach(conn)
        if conn.on_cut is not None:
            conn.on_cut(conn)
        else:
            err = InputError("E103", seq=conn.last_seq)
            payload = {"error": {"code": err.code, "message": err.detail, "seq": conn.last_seq}}
            conn.write(b"event: error\ndata: %s\n\n" % json.dumps(payload).encode())
        transport = conn.transport
        if transport is not None:
            asyncio.get_running_loop().call_later(DROP_AFTER_S, transport.abort)

    # ------------------------------------------------------------------ the periodic timer
    def start(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(TICK_S, self.tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def tick(self) -> None:
        """Keepalives with the newest seq, closed transports, retention by age, lag gauges."""
        now = time.monotonic()
        newest = self.hub.last_seq
        idle = now - self.keepalive_s
        total = largest = 0
        for conn in list(self.connections):
            transport = conn.transport
            if transport is None or transport.is_closing():
                self.detach(conn)
                continue
            size = transport.get_write_buffer_size()
            total += size
            largest = max(largest, size)
            if conn.last_write <= idle:
                if conn.following:  # a watermark would cover subscriptions not attached yet
                    conn.write(b": keepalive\n\n" if conn.kind == "sse" else b"\x89\x00")  # a comment, a ping
                elif conn.kind == "sse":
                    conn.write(b"id: %d\n: keepalive\n\n" % newest)
                    conn.last_seq = max(conn.last_seq, newest)
                else:
                    conn.write(ws_frame(b'{"seq": %d}' % newest))
                    conn.last_seq = max(conn.last_seq, newest)
        self.metrics.stream_buffered_bytes.set(total)
        self.metrics.stream_lag_bytes.set(largest)
        self.hub.trim(now)
        self._timer = asyncio.get_running_loop().call_later(TICK_S, self.tick)
