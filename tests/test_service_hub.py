"""The event ring, the fan-out and the log, in process.

Ring: retention by count and by age, per-subscription watermarks (a quiet subscription resumes
without a reset), the restored snapshot's floor.  Fan-out: one write per connection per block,
shared bytes, SSE and WebSocket framing, removal ending an SSE stream, keepalive ids, a slow
consumer cut with its last seq; a differential property (resume then live against every event).
Log: torn records.  Service: the engine queue, 503 while recovering, the page's files."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("aiohttp")

from skype.service.events import EventBlock  # noqa: E402
from skype.service.fanout import Connection, Fanout  # noqa: E402
from skype.service.hub import Hub  # noqa: E402
from skype.service.metrics import Metrics  # noqa: E402
from skype.service.wal import Log  # noqa: E402


def events(first: int, n: int, sub: int = 1) -> list[dict]:
    return [{"sub": sub, "seq": s, "position": s, "entered": [], "left": []} for s in range(first, first + n)]


class FakeTransport:
    """What the fan-out uses of an asyncio transport; ``buffered`` plays the kernel's backlog."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.buffered = 0
        self.closing = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def abort(self) -> None:
        self.aborted = self.closing = True


def sse_events(data: bytes) -> list[tuple[int | None, dict | None]]:
    """(id, data object) of each SSE block of ``data`` (keepalives: (id, None))."""
    out = []
    for block in data.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if fields:
            out.append((int(fields["id"]) if "id" in fields else None,
                        json.loads(fields["data"]) if "data" in fields else None))
    return out


def ws_messages(data: bytes) -> list[dict]:
    """The text frames of ``data`` (unmasked, server to client) as JSON objects."""
    out, at = [], 0
    while at < len(data):
        assert data[at] == 0x81
        n = data[at + 1]
        at += 2
        if n == 126:
            n, at = int.from_bytes(data[at:at + 2], "big"), at + 2
        elif n == 127:
            n, at = int.from_bytes(data[at:at + 8], "big"), at + 8
        out.append(json.loads(data[at:at + n]))
        at += n
    return out


def unchunk(data: bytes) -> bytes:
    """The body of HTTP/1.1 chunks; checks each write is whole chunks."""
    out, at = b"", 0
    while at < len(data):
        line_end = data.index(b"\r\n", at)
        n = int(data[at:line_end], 16)
        out += data[line_end + 2:line_end + 2 + n]
        assert data[line_end + 2 + n:line_end + 4 + n] == b"\r\n"
        at = line_end + 4 + n
    return out


def test_retention_by_count_keeps_per_subscription_watermarks():
    hub = Hub(retain=5)
    hub.publish(events(1, 3, sub=7) + events(4, 6, sub=1), None)  # sub 7: seqs 1-3, sub 1: 4-9
    assert hub.retained_events() == [(s, 1) for s in range(5, 10)] and hub.retained == 5
    assert hub.last_evicted == {7: 3, 1: 4}
    assert not hub.covers(3)  # the ring no longer starts at 4 ...
    assert hub.gap([7], 3) is None  # ... but nothing of sub 7 after 3 was dropped: a quiet one resumes
    assert hub.backlog([7], 3) == []
    assert hub.gap([7], 2) == "evicted" and hub.gap([1], 3) == "evicted" and hub.gap([1], 4) is None
    assert hub.gap([1, 7], 10) == "ahead" and hub.gap([99], 0) is None
    found = hub.backlog([1], 6)
    assert [b.seq0 + i for b, idx in found for i in idx] == [7, 8, 9]
    assert hub.backlog([1], 4, limit=5) is not None and hub.backlog([1], 4, limit=4) is None  # 5 after seq 4


def test_retention_by_age():
    now = [100.0]
    hub = Hub(retain=1000, retain_seconds=10.0, clock=lambda: now[0])
    hub.publish(events(1, 2, sub=3), None)
    now[0] = 105.0
    hub.publish(events(3, 2, sub=4) + [], None)
    now[0] = 112.0  # the first block is 12 s old, the second 7 s
    hub.trim()
    assert hub.retained_events() == [(3, 4), (4, 4)] and hub.last_evicted == {3: 2}
    assert hub.gap([3], 2) is None and hub.gap([3], 1) == "evicted" and hub.gap([4], 0) is None
    now[0] = 116.0
    hub.trim()
    assert hub.retained == 0 and hub.last_evicted == {3: 2, 4: 4} and hub.gap([4], 4) is None


def test_a_restored_snapshot_is_a_floor():
    hub = Hub(retain=10)
    hub.start_at(50)
    assert hub.last_seq == 50 and hub.gap([1], 50) is None and hub.gap([1], 49) == "restart"
    hub.publish(events(51, 2), None)
    assert hub.gap([1], 50) is None and hub.gap([2], 52) is None


def test_fanout_writes_once_per_connection_per_block_and_shares_the_bytes():
    async def run():
        hub, metrics = Hub(retain=100), Metrics()
        fanout = Fanout(hub, metrics)
        a_t, b_t, w_t = FakeTransport(), FakeTransport(), FakeTransport()
        a = Connection(a_t, "sse", chunked=True, ends_when_removed=True)
        b = Connection(b_t, "sse")
        w = Connection(w_t, "ws")
        fanout.attach(a, [1, 2], [])
        fanout.attach(b, [2], [])
        fanout.attach(w, [1, 2, 3], [])
        block = [{"sub": s, "seq": 10 + s, "position": 5, "entered": [{"id": 4, "score": 0.1 * s}], "left": [s]}
                 for s in (1, 2, 3, 4)]
        hub.publish(block, 0.0)
        assert len(a_t.writes) == len(b_t.writes) == len(w_t.writes) == 1  # one write each
        assert sse_events(unchunk(a_t.writes[0])) == [(11, block[0]), (12, block[1])]
        assert sse_events(b_t.writes[0]) == [(12, block[1])]
        assert ws_messages(w_t.writes[0]) == block[:3]
        assert hub.ring[-1].encoded[1] in b_t.writes[0]  # the same bytes, encoded once
        assert (a.last_seq, b.last_seq, w.last_seq) == (12, 12, 13)
        assert metrics.publish_to_write.counts[-1] == 6  # one count per event and connection
        # removal: the SSE stream of several subscriptions drops it, and ends with the last
        hub.publish([{"sub": 1, "seq": 15, "position": 6, "entered": [], "left": [4], "removed": True}], None)
        assert a.subs == {2} and not a.done.done()
        hub.publish([{"sub": 2, "seq": 16, "position": 6, "entered": [], "left": [], "removed": True}], None)
        assert a.done.done() and a not in fanout.connections and b.subs == {2}
        # keepalives carry the newest seq; closed transports are let go
        b.last_write = w.last_write = 0.0
        w_t.closing = True
        fanout.tick()
        fanout.stop()
        assert sse_events(b_t.writes[-1]) == [(16, None)] and b.last_seq == 16
        assert w not in fanout.connections and w.done.done()

    asyncio.run(run())


def test_websocket_watermarks_wait_for_pending_subscribes():
    """A WebSocket's watermark ``{"seq": n}`` claims every event of its subscriptions up to n:
    while one of its subscribe requests is being resolved it gets a ping instead."""
    async def run():
        hub = Hub(retain=10)
        fanout = Fanout(hub, Metrics())
        transport = FakeTransport()
        conn = Connection(transport, "ws")
        fanout.attach(conn, [1], [])
        hub.publish(events(1, 3, sub=2), None)  # not its subscription: nothing written
        conn.following, conn.last_write = 1, 0.0
        fanout.tick()
        assert transport.writes == [b"\x89\x00"] and conn.last_seq == 0
        conn.following, conn.last_write = 0, 0.0
        fanout.tick()
        fanout.stop()
        assert ws_messages(transport.writes[-1]) == [{"seq": 3}] and conn.last_seq == 3

    asyncio.run(run())


def test_a_slow_consumer_is_cut_with_its_last_seq():
    async def run():
        hub, metrics = Hub(retain=100), Metrics()
        fanout = Fanout(hub, metrics, max_buffer_bytes=1000)
        slow_t, fast_t = FakeTransport(), FakeTransport()
        slow, fast = Connection(slow_t, "sse"), Connection(fast_t, "sse")
        fanout.attach(slow, [1], [])
        fanout.attach(fast, [1], [])
        hub.publish(events(1, 3), None)
        slow_t.buffered = 1001  # the consumer stopped reading: the kernel and the transport are full
        hub.publish(events(4, 2), None)
        assert slow.cut and slow.done.done() and slow not in fanout.connections
        got = sse_events(slow_t.writes[-1].replace(b"event: error\n", b"id: 0\n"))
        assert got[0][1]["error"]["code"] == "E103" and got[0][1]["error"]["seq"] == 3 == slow.last_seq
        assert [seq for seq, _ in sse_events(b"".join(fast_t.writes))] == [1, 2, 3, 4, 5]
        assert metrics.slow_consumers._value.get() == 1
        await asyncio.sleep(0)

    asyncio.run(run())


def random_blocks(rng: random.Random, n_blocks: int, subs: int) -> list[EventBlock]:
    """Blocks of top-k events (columns) with consecutive seqs; sometimes one-off objects."""
    out, seq = [], 1
    for b in range(n_blocks):
        chosen = sorted(rng.sample(range(subs), rng.randint(1, subs)))
        if rng.random() < 0.2:
            objs = [{"sub": s, "seq": seq + i, "position": b, "entered": [{"id": rng.randint(0, 9), "score": 0.5}],
                     "left": [], **({"removed": True} if rng.random() < 0.1 else {})} for i, s in enumerate(chosen)]
            out.append(EventBlock.from_objects(objs))
        else:
            counts = [rng.randint(0, 3) for _ in chosen]
            lefts = [rng.randint(0, 2) for _ in chosen]
            ptr = np.r_[0, np.cumsum(counts)].astype(np.int64)
            lptr = np.r_[0, np.cumsum(lefts)].astype(np.int64)
            out.append(EventBlock(seq, np.array(chosen, np.int64), b, ent_ptr=ptr,
                                  ent_ids=np.array([rng.randint(0, 99) for _ in range(ptr[-1])], np.int64),
                                  ent_scores=np.array([rng.random() for _ in range(ptr[-1])]),
                                  left_ptr=lptr, left_ids=np.array([rng.randint(0, 99) for _ in range(lptr[-1])],
                                                                   np.int64)))
        seq += len(chosen)
    return out


@given(st.integers(0, 10**6), st.integers(1, 40), st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_resume_then_live_equals_every_event_of_the_subscriptions(seed, retain, n_blocks):
    """Differential: a connection that resumes after a random seq (backlog from the ring when
    :meth:`Hub.gap` allows, then live) receives exactly the events of its subscriptions after
    that seq, in seq order, encoded as ``EventBlock.event`` says; when the gap forbids it, some
    event of one of its subscriptions after that seq was really dropped."""
    rng = random.Random(seed)
    blocks = random_blocks(rng, n_blocks, 6)
    every = [b.event(i) for b in blocks for i in range(len(b))]

    async def run():
        hub = Hub(retain=retain)
        fanout = Fanout(hub, Metrics())
        cut = rng.randint(0, len(blocks))
        for b in blocks[:cut]:
            hub.publish([b], None)
        mine = set(rng.sample(range(6), rng.randint(1, 3)))
        after = rng.randint(0, hub.last_seq)
        kind = rng.choice(["sse", "ws"])
        transport = FakeTransport()
        conn = Connection(transport, kind)
        reason = hub.gap(mine, after)
        retained = {seq for seq, _ in hub.retained_events()}
        wanted = [ev for ev in every if ev["sub"] in mine and ev["seq"] > after]
        if reason is not None:  # the oracle: an event of theirs after `after` and up to now is gone
            assert any(ev["seq"] <= hub.last_seq and ev["seq"] not in retained for ev in wanted)
            fanout.stop()
            return
        found = hub.backlog(mine, after)
        fanout.attach(conn, sorted(mine), fanout.frames(conn, found))
        for b in blocks[cut:]:
            hub.publish([b], None)
        data = b"".join(transport.writes)
        got = [obj for _, obj in sse_events(data)] if kind == "sse" else ws_messages(data)
        assert got == wanted
        if kind == "sse":
            assert [seq for seq, _ in sse_events(data)] == [ev["seq"] for ev in wanted]
        fanout.stop()

    asyncio.run(run())


def test_log_cuts_a_torn_tail(tmp_path):
    log = Log(tmp_path, "always")
    list(log.recover())
    for i in range(5):
        log.append({"op": "advance", "t": i})
    log.sync()
    log.rotate()
    log.append({"op": "advance", "t": 5})
    log.close()
    seg = sorted(tmp_path.glob("log-*.wal"))[-1]
    with open(seg, "ab") as fh:
        fh.write(b"\x10\x00\x00\x00garbage")
    again = Log(tmp_path, "always")
    assert [c["t"] for _, c in again.recover()] == [0, 1, 2, 3, 4, 5]
    assert again.truncated_bytes == 11 and again.next_index == 6
    again.drop_before(5)
    assert len(list(tmp_path.glob("log-*.wal"))) == 1
    assert [i for i, _ in Log(tmp_path, "never").recover(5)] == [5]


def test_full_engine_queue_is_refused(tmp_path):
    from skype.errors import InputError
    from skype.reference import ReferenceEngine
    from skype.service.metrics import Metrics
    from skype.service.state import State
    from skype.service.worker import Busy, Worker

    loop = asyncio.new_event_loop()
    try:
        worker = Worker(tmp_path, State(lambda v: ReferenceEngine(window=3, vocabulary=v)), fsync="never",
                        queue_size=2, snapshot_every=10, snapshot_seconds=60, metrics=Metrics(), loop=loop,
                        publish=lambda evs, t0: None)
        worker.submit("results")
        worker.submit("results")
        with pytest.raises(Busy):
            worker.submit("results")  # the thread is not running: the queue stays full
        state = worker.state
        with pytest.raises(InputError, match="E012"):
            state.apply({"op": "msgs", "recs": [{"id": 1, "x": 0, "y": 0, "text": "zebra"},
                                                {"id": 2, "x": "?", "y": 0, "text": "yak"}]})
        assert len(state.vocabulary) == 0 and state.position == 0  # the rejected batch left no term behind
    finally:
        loop.close()


def test_recovering_server_answers_503(tmp_path):
    from aiohttp.test_utils import TestClient, TestServer

    from skype.reference import ReferenceEngine
    from skype.service.app import Limits, Service
    from skype.service.metrics import Metrics
    from skype.service.state import State
    from skype.service.worker import Worker

    async def run():
        loop = asyncio.get_running_loop()
        hub = Hub(10)
        metrics = Metrics()
        worker = Worker(tmp_path, State(lambda v: ReferenceEngine(window=3, vocabulary=v)), fsync="never",
                        queue_size=4, snapshot_every=10, snapshot_seconds=60, metrics=metrics, loop=loop,
                        publish=hub.publish)  # not started: still "recovering"
        service = Service(worker, hub, None, Limits(1000, 10, 10, 10, 10), metrics)
        async with TestClient(TestServer(service.app())) as client:
            for path in ("/healthz", "/v1/results", "/v1/subscriptions/1"):
                r = await client.get(path)
                assert r.status == 503 and (await r.json())["error"]["code"] == "E094"
            assert (await client.get("/metrics")).status == 200

    asyncio.run(run())


def test_page_files_and_no_escape(tmp_path, monkeypatch):
    from aiohttp.test_utils import TestClient, TestServer

    from skype.reference import ReferenceEngine
    from skype.service import app as app_module
    from skype.service.metrics import Metrics
    from skype.service.state import State
    from skype.service.worker import Worker

    page = tmp_path / "page"
    (page / "js").mkdir(parents=True)
    (page / "index.html").write_text("<h1>map</h1>")
    (page / "js" / "map.js").write_text("var map;")
    (tmp_path / "secret.txt").write_text("no")

    async def run():
        loop = asyncio.get_running_loop()
        worker = Worker(tmp_path / "d", State(lambda v: ReferenceEngine(window=3, vocabulary=v)), fsync="never",
                        queue_size=4, snapshot_every=10, snapshot_seconds=60, metrics=Metrics(), loop=loop,
                        publish=lambda *a: None)
        service = app_module.Service(worker, Hub(10), None, app_module.Limits(1000, 10, 10, 10, 10), Metrics())
        got = {}
        async with TestClient(TestServer(service.app())) as client:
            for path in ("/", "/page/js/map.js", "/page/../secret.txt", "/page/%2e%2e/secret.txt", "/page/none.js"):
                r = await client.get(path)
                got[path] = (r.status, await r.text())
        return got

    monkeypatch.setattr(app_module, "PAGE_DIR", page)
    got = asyncio.run(run())
    assert got["/"] == (200, "<h1>map</h1>") and got["/page/js/map.js"] == (200, "var map;")
    assert all(got[p][0] == 404 for p in ("/page/../secret.txt", "/page/%2e%2e/secret.txt", "/page/none.js"))


def test_a_stream_is_answered_200_and_waits_when_the_engine_queue_is_full(tmp_path):
    """EventSource gives up on a non-200 answer: a stream that needs a reset while the engine
    queue is full is answered 200 at once, and its reset is asked again until it is queued."""
    from aiohttp.test_utils import TestClient, TestServer

    from skype.reference import ReferenceEngine
    from skype.service.app import Limits, Service
    from skype.service.state import State
    from skype.service.worker import Worker

    async def run():
        loop = asyncio.get_running_loop()
        hub, metrics = Hub(10), Metrics()
        worker = Worker(tmp_path, State(lambda v: ReferenceEngine(window=3, vocabulary=v)), fsync="never",
                        queue_size=1, snapshot_every=10, snapshot_seconds=60, metrics=metrics, loop=loop,
                        publish=hub.publish)  # not started: nothing takes the jobs
        worker.status = "ok"
        worker.state.records[1] = b"{}"
        hub.start_at(5)  # a restored snapshot at seq 5: a resume after 0 needs a reset
        worker.submit("results")  # the queue (of 1) is full
        service = Service(worker, hub, None, Limits(1000, 10, 10, 10, 10), metrics)
        async with TestClient(TestServer(service.app())) as client:
            resp = await client.get("/v1/subscriptions/1/events", params={"after": "0"})
            assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
            await asyncio.sleep(0.2)  # the reset is refused (E093) and asked again, meanwhile
            assert worker.jobs.get_nowait().kind == "results"
            for _ in range(100):
                await asyncio.sleep(0.02)
                if worker.jobs.qsize():
                    break
            assert worker.jobs.get_nowait().kind == "reset"
            assert metrics.resets.labels("restart")._value.get() == 1
            resp.close()
        service.fanout.stop()

    asyncio.run(run())


def test_websocket_frame_lengths():
    from skype.service.fanout import ws_frame

    for n in (0, 125, 126, 65535, 65536, 70000):
        payload = json.dumps({"seq": 1, "pad": "x" * max(0, n - 22)}).encode()
        assert ws_messages(ws_frame(payload)) == [json.loads(payload)]
