"""The event hub and the log, in process: ring resume, slow consumers, torn records."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("aiohttp")

from skype.service.hub import CUT, Hub, Listener  # noqa: E402
from skype.service.wal import Log  # noqa: E402


def events(first: int, n: int, sub: int = 1) -> list[dict]:
    return [{"sub": sub, "seq": s, "position": s, "entered": [], "left": []} for s in range(first, first + n)]


def test_ring_resume_and_slow_consumer():
    async def run():
        hub = Hub(retain=5)
        hub.publish(events(1, 8), None)
        assert not hub.covers(2) and hub.covers(3)
        fast, slow = Listener(100), Listener(2)
        hub.attach(fast, [1], 5)
        assert [item[0] for item in fast.pending] == [6, 7, 8]  # the backlog, sent before the queue
        fast.pending.clear()
        hub.attach(slow, [1], 8)
        hub.publish(events(9, 3) + events(12, 1, sub=2), None)
        assert slow.overflowed and slow.queue.qsize() == 2  # bounded: the third was refused
        assert fast.queue.qsize() == 3  # sub 2's event went to nobody
        hub.detach(slow)
        assert hub.by_sub[1] == {fast}
        assert [seq for seq, _ in hub.retained_events()] == [8, 9, 10, 11, 12] and hub.retained == 5

    asyncio.run(run())


def test_attach_finds_the_backlog_in_the_blocks_and_refuses_a_backlog_above_its_limit():
    async def run():
        hub = Hub(retain=6)
        hub.publish([ev for s in range(1, 11) for ev in events(s, 1, sub=s % 3)], None)
        assert hub.retained_events() == [(s, s % 3) for s in range(5, 11)]  # exactly the newest 6
        assert not hub.attach(Listener(4), [0, 1], 4, limit=3)  # 4 events after seq 4: above 3
        listener = Listener(4)
        assert hub.attach(listener, [0, 1], 4, limit=4)
        assert [item[0] for item in listener.pending] == [6, 7, 9, 10]  # in seq order
        assert hub.by_sub[0] == {listener} and 2 not in hub.by_sub

    asyncio.run(run())


def test_pending_items_go_first_and_are_never_cut():
    async def run():
        hub = Hub(retain=10)
        hub.publish(events(1, 3), None)
        listener = Listener(1)
        hub.attach(listener, [1], 0, limit=3)
        hub.publish(events(4, 2), None)  # the queue of 1 overflows
        assert listener.overflowed
        listener.prepend([(9, 1, "reset", None)])
        got = [(await listener.next())[0] for _ in range(4)]
        assert got == [9, 1, 2, 3] and await listener.next() is CUT

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
