"""Durability of ``skype.run serve``: SIGKILL under load, a torn or corrupt log tail, a damaged
snapshot, SIGTERM's snapshot.  After each restart the results equal the reference over exactly
the acknowledged writes (a write in flight at the kill may have become durable without its
acknowledgement: then it is applied whole), and event streams resume with no gap or duplicate."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import threading
import time

import pytest
import requests

pytest.importorskip("aiohttp")
websockets = pytest.importorskip("websockets")

from service_server import (  # noqa: E402
    NDJSON, Folder, Server, check_stream, ndjson, reference_results, same_results, server_results,
)
from test_service_api import msg_record, sub_record  # noqa: E402

WINDOW = 60


def healthz(url: str) -> dict:
    return requests.get(url + "/healthz", timeout=10).json()


def current_seq(url: str) -> int:
    return requests.get(url + "/v1/subscriptions/1", timeout=10).json()["seq"]


async def follow(url: str, subs: list[int], after: int, out: list, until_seq: int | None = None) -> None:
    """Collect events into ``out`` until the connection drops (or ``until_seq`` is reached)."""
    try:
        async with websockets.connect(url.replace("http://", "ws://") + "/v1/events") as ws:
            await ws.send(json.dumps({"subscribe": subs, "after": after}))
            while until_seq is None or not out or out[-1]["seq"] < until_seq:
                out.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
    except (websockets.ConnectionClosed, OSError):
        pass


class Publisher(threading.Thread):
    """Posts NDJSON batches one after another; records the acknowledged ones and the one in flight."""

    def __init__(self, url: str, rng: random.Random, first_id: int) -> None:
        super().__init__(daemon=True)
        self.url, self.rng, self.next_id = url, rng, first_id
        self.acked: list[list[dict]] = []
        self.inflight: list[dict] | None = None
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            batch = [msg_record(self.next_id + i, self.rng) for i in range(self.rng.randint(1, 20))]
            self.inflight = batch
            try:
                r = requests.post(self.url + "/v1/messages", data=ndjson(batch), headers=NDJSON, timeout=10)
            except requests.RequestException:
                return
            if r.status_code != 200:
                return
            self.acked.append(batch)
            self.inflight = None
            self.next_id += len(batch)


def test_sigkill_under_load(tmp_path):
    rng = random.Random(11)
    args = ("--window", str(WINDOW), "--snapshot-every", "60")
    server = Server(tmp_path / "data", *args).start()
    writes: list = []
    subs = list(range(1, 16))
    for sid in subs:
        rec = sub_record(sid, rng)
        assert requests.put(f"{server.url}/v1/subscriptions/{sid}", json=rec).status_code == 201
        writes.append(("sub", rec))
    events: list[dict] = []
    last_seq, next_id, ready_s = 0, 0, []
    for kill in range(3):
        collected: list[dict] = []
        follower = threading.Thread(target=lambda: asyncio.run(follow(server.url, subs, last_seq, collected)))
        follower.start()
        pub = Publisher(server.url, rng, next_id)
        pub.start()
        # under load, with a stream open: wait (bounded) for a first acknowledgement and a first
        # event, so that a slow machine cannot turn the kill into one before any load
        deadline = time.monotonic() + 60
        while not (pub.acked and collected) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.8))
        server.stop(signal.SIGKILL)
        pub.join(30)
        follower.join(30)
        assert not pub.is_alive() and not follower.is_alive()
        assert pub.acked and collected  # the kill came under load, with a stream open
        last_seq = check_stream(collected, last_seq)
        events += collected
        acked = sum(len(b) for b in pub.acked)
        before = sum(len(b) for op, b in writes if op == "msgs")
        writes += [("msgs", b) for b in pub.acked]
        t0 = time.monotonic()
        server.start()
        ready_s.append(time.monotonic() - t0)
        position = healthz(server.url)["position"]
        if pub.inflight is not None and position == before + acked + len(pub.inflight):
            writes.append(("msgs", pub.inflight))  # durable, not acknowledged: applied whole
        else:
            assert position == before + acked
        next_id = pub.next_id + 1000
        same_results(server_results(server.url), reference_results(writes, window=WINDOW))
    # resume after the last seq seen before the last kill: no gap, no duplicate, folds to the results
    tail: list[dict] = []
    end = current_seq(server.url)
    if end > last_seq:
        asyncio.run(follow(server.url, subs, last_seq, tail, until_seq=end))
    check_stream(tail, last_seq)
    folder = Folder()
    for ev in events + tail:
        folder.apply(ev)
    want = reference_results(writes, window=WINDOW)
    assert folder.ids() == {sid: {e["id"] for e in line["topk"]} for sid, line in want.items()}
    server.stop()
    print(f"ready after SIGKILL in {', '.join(f'{s:.2f}' for s in ready_s)} s; {len(events) + len(tail)} events, "
          f"{folder.resets} resets, {sum(len(b) for op, b in writes if op == 'msgs')} messages")


def _load(url: str, rng: random.Random, writes: list, n_batches: int, first_id: int = 0) -> int:
    for sid in range(1, 6):
        rec = sub_record(sid, rng)
        assert requests.put(f"{url}/v1/subscriptions/{sid}", json=rec).status_code == 201
        writes.append(("sub", rec))
    mid = first_id
    for _ in range(n_batches):
        batch = [msg_record(mid + i, rng) for i in range(rng.randint(1, 10))]
        mid += len(batch)
        assert requests.post(url + "/v1/messages", data=ndjson(batch), headers=NDJSON).status_code == 200
        writes.append(("msgs", batch))
    return mid


def test_torn_and_corrupt_log_tail(tmp_path):
    rng = random.Random(5)
    data = tmp_path / "data"
    writes: list = []
    with Server(data, "--window", "30") as s:
        _load(s.url, rng, writes, 8)
        s.stop(signal.SIGKILL)
    seg = sorted((data / "log").glob("log-*.wal"))[-1]
    size = seg.stat().st_size
    with open(seg, "ab") as fh:  # a torn record: a header promising more than follows
        fh.write((500).to_bytes(4, "little") + b"\0\0\0\0" + b'{"op": "ms')
    with Server(data, "--window", "30") as s:
        same_results(server_results(s.url), reference_results(writes, window=30))
        s.stop(signal.SIGKILL)
    assert seg.stat().st_size == size
    raw = bytearray(seg.read_bytes())  # flip a byte of the last record's payload: it is cut
    raw[-3] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with Server(data, "--window", "30") as s:
        same_results(server_results(s.url), reference_results(writes[:-1], window=30))
    assert "damaged tail" in s.log.read_text()


def _snapshots(data) -> list:
    return sorted(p for p in (data / "snapshots").glob("snap-*") if not p.name.endswith(".tmp"))


def test_damaged_snapshot_falls_back(tmp_path):
    rng = random.Random(9)
    data = tmp_path / "data"
    writes: list = []
    with Server(data, "--window", "30", "--snapshot-every", "4") as s:
        mid = _load(s.url, rng, writes, 12)
        deadline = time.monotonic() + 30  # snapshots are written on their own thread
        while len(_snapshots(data)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        s.stop(signal.SIGKILL)
    snaps = _snapshots(data)
    assert len(snaps) == 2  # the newest two (a SIGKILL may also leave a half-written .tmp)
    target = snaps[-1] / "window.parquet"
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    target.write_bytes(bytes(raw))
    with Server(data, "--window", "30") as s:
        same_results(server_results(s.url), reference_results(writes, window=30))
        batch = [msg_record(mid + i, rng) for i in range(5)]
        requests.post(s.url + "/v1/messages", data=ndjson(batch), headers=NDJSON)
        writes.append(("msgs", batch))
        assert s.stop() == 0  # SIGTERM: a snapshot of everything
    assert "damaged" in s.log.read_text()
    newest = sorted((data / "snapshots").glob("snap-*"))[-1]
    meta = json.loads((newest / "meta.json").read_text())
    assert meta["position"] == sum(len(b) for op, b in writes if op == "msgs")
    with Server(data, "--window", "30") as s:
        same_results(server_results(s.url), reference_results(writes, window=30))


def test_time_window_advance_survives_restart(tmp_path):
    data = tmp_path / "data"
    rng = random.Random(2)
    writes: list = []
    with Server(data, "--window-seconds", "10", "--fsync", "never") as s:  # the OS has it: a kill loses nothing
        for sid in range(1, 4):
            rec = sub_record(sid, rng)
            requests.put(f"{s.url}/v1/subscriptions/{sid}", json=rec)
            writes.append(("sub", rec))
        batch = [dict(msg_record(i, rng), t=float(i)) for i in range(15)]
        assert requests.post(s.url + "/v1/messages", data=ndjson(batch), headers=NDJSON).status_code == 200
        writes.append(("msgs", batch))
        r = requests.post(s.url + "/v1/advance", json={"t": 20.5})
        assert r.status_code == 200
        writes.append(("advance", 20.5))
        r = requests.post(s.url + "/v1/advance", json={"t": 3})
        assert r.status_code == 400 and r.json()["error"]["code"] == "E009"
        r = requests.post(s.url + "/v1/advance", json={"t": "later"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "E012"
        same_results(server_results(s.url), reference_results(writes, window_seconds=10))
        assert healthz(s.url)["window"] == 4
        s.stop(signal.SIGKILL)
    with Server(data, "--window-seconds", "10") as s:
        same_results(server_results(s.url), reference_results(writes, window_seconds=10))
    r = Server(data, "--window", "10")
    with pytest.raises(RuntimeError, match="E102"):
        r.start()
