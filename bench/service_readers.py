"""The load client's readers (``bench/service_load.py``): followers of the service's event
streams, SSE or WebSocket, run in reader processes of their own so that the publisher and the
driver's loop are not delayed by them.  Each stream keeps every event's text as it came, with
its arrival time; the driver decodes and folds them after the run (the same check as folding
them live: every fold must equal the server's result), so a reader's work per event is a read
and an append.  The readers also sample their own loop lag and CPU share, to tell the client's
delay from the server's.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import msgspec
import numpy as np

_decode = msgspec.json.Decoder().decode
_SEQ = re.compile(rb'"seq":\s*(\d+)')


def percentiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(np.asarray(values), [50, 99])
    return float(p50), float(p99)


class Stream:
    """One connection's record: what it received (each event's JSON text, decoded only after
    the run: the reader's loop does no parsing), when, and its reconnects."""

    def __init__(self, name: str, protocol: str, subs: list[int]) -> None:
        self.name, self.protocol, self.subs = name, protocol, subs
        self.raw: list[bytes] = []
        self.received_at: list[float] = []
        self.events: list[dict] = []  # decoded after the run (decode)
        self.reconnects = 0
        self.connected = asyncio.Event()
        self.last_seq = 0  # the stream's resume point (SSE: its Last-Event-ID; WS: the watermark)

    def take(self, raw: bytes, now: float) -> None:
        self.raw.append(raw)
        self.received_at.append(now)

    def decode(self) -> None:
        """The received texts as events (WebSocket watermarks, which carry no ``sub``, dropped)."""
        events, times = [], []
        for raw, now in zip(self.raw, self.received_at):
            obj = _decode(raw)
            if "sub" in obj:
                events.append(obj)
                times.append(now)
        self.events, self.received_at, self.raw = events, times, []

    def resume_seq(self) -> int:
        """The seq to resume after (WebSocket: the last seq seen, event or watermark)."""
        if self.protocol == "ws" and self.raw:
            m = _SEQ.search(self.raw[-1])
            if m:
                self.last_seq = max(self.last_seq, int(m.group(1)))
        return self.last_seq


async def sse_follow(session, url: str, stream: Stream, stop: asyncio.Event) -> None:
    """Follow the stream's subscriptions over one SSE connection, resuming after a disconnect."""
    import aiohttp

    if len(stream.subs) == 1:
        path, params = f"/v1/subscriptions/{stream.subs[0]}/events", []
    else:
        path, params = "/v1/events", [("sub", str(s)) for s in stream.subs]
    while not stop.is_set():
        try:
            async with session.get(url + path, params=params + [("after", str(stream.resume_seq()))],
                                   timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"SSE {stream.name}: HTTP {resp.status}")
                stream.connected.set()
                buf = b""
                async for chunk in resp.content.iter_any():
                    now = time.perf_counter()
                    buf += chunk
                    *blocks, buf = buf.split(b"\n\n")
                    for block in blocks:
                        for line in block.split(b"\n"):
                            if line.startswith(b"data: "):
                                stream.take(line[6:], now)
                            elif line.startswith(b"id: "):
                                stream.last_seq = max(stream.last_seq, int(line[4:]))
        except (aiohttp.ClientError, RuntimeError, asyncio.TimeoutError):
            pass
        if not stop.is_set():
            stream.reconnects += 1
            await asyncio.sleep(0.1)


async def ws_follow(session, url: str, stream: Stream, stop: asyncio.Event) -> None:
    import aiohttp

    while not stop.is_set():
        try:
            async with session.ws_connect(url + "/v1/events", max_msg_size=0, compress=0) as ws:
                await ws.send_str(json.dumps({"subscribe": stream.subs, "after": stream.resume_seq()}))
                stream.connected.set()
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        stream.take(msg.data.encode(), time.perf_counter())
                    elif msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        break
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass
        if not stop.is_set():
            stream.reconnects += 1
            await asyncio.sleep(0.1)


async def wait_idle(count, idle: float, limit: float) -> None:
    """Until ``count()`` (events received so far) has not changed for ``idle`` seconds."""
    start = time.perf_counter()
    counts = None
    quiet_since = time.perf_counter()
    while time.perf_counter() - start < limit:
        now = count()
        if now != counts:
            counts, quiet_since = now, time.perf_counter()
        elif time.perf_counter() - quiet_since >= idle:
            return
        await asyncio.sleep(0.1)


def reader_main(url: str, protocol: str, specs: list, received, connected, stop_flag, out) -> None:
    """A reader process: follows its share of the streams until ``stop_flag``; sends back each
    stream's received texts and times, and its event loop's lag and CPU clock samples."""
    asyncio.run(_reader(url, protocol, specs, received, connected, stop_flag, out))


async def _reader(url: str, protocol: str, specs: list, received, connected, stop_flag, out) -> None:
    import aiohttp

    streams = [Stream(name, protocol, subs) for name, subs in specs]
    stop = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        follow = sse_follow if protocol == "sse" else ws_follow
        tasks = [asyncio.create_task(follow(session, url, st, stop)) for st in streams]
        lag: list[tuple[float, float]] = []  # (when, how late a 10 ms sleep woke): the loop's lag
        cpu: list[tuple[float, float]] = []  # (when, this process's CPU seconds)
        while not stop_flag.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            lag.append((now, now - t - 0.01))
            if len(lag) % 10 == 0:
                received.value = sum(len(st.received_at) for st in streams)
                connected.value = sum(st.connected.is_set() for st in streams)
                cpu.append((now, time.process_time()))
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    out.put(([(st.name, st.raw, st.received_at, st.reconnects) for st in streams], lag, cpu))


def loop_figures(samples: list, start: float, end: float) -> tuple[float, float, float]:
    """Over [start, end]: the readers' loop lag p50 and p99 (ms), and the busiest reader's CPU
    share (its CPU seconds over wall seconds)."""
    lags = [d for lag, _ in samples for t, d in lag if start <= t <= end]
    shares = []
    for _, cpu in samples:
        inside = [(t, c) for t, c in cpu if start <= t <= end]
        if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
            shares.append((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]))
    p50, p99 = percentiles(lags)
    return 1e3 * p50, 1e3 * p99, max(shares) if shares else float("nan")
