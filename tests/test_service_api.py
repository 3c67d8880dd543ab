"""API tests of ``python -m skype.run serve`` against the real server on loopback: every route,
bad input on every route (a rejected request changes nothing), results equal to the reference
over the acknowledged writes, SSE and WebSocket streams with resume."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
import requests

pytest.importorskip("aiohttp")
websockets = pytest.importorskip("websockets")

from service_server import NDJSON, Folder, Server, ndjson, reference_results, same_results, server_results  # noqa: E402

WINDOW = 40


def sub_record(sid: int, rng: random.Random) -> dict:
    words = ["pizza", "pasta", "sushi", "ramen", "tacos", "curry"]
    return {"id": sid, "x": rng.uniform(-10, 10), "y": rng.uniform(-10, 10), "k": rng.randint(1, 4),
            "alpha": rng.uniform(0.1, 0.9), "text": " ".join(rng.sample(words, rng.randint(1, 2)))}


def msg_record(mid: int, rng: random.Random) -> dict:
    words = ["pizza", "pasta", "sushi", "ramen", "tacos", "curry", "bread"]
    return {"id": mid, "x": rng.uniform(-10, 10), "y": rng.uniform(-10, 10),
            "text": " ".join(rng.choices(words, k=rng.randint(1, 3)))}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("api") / "data", "--window", str(WINDOW), "--max-body-bytes", "20000",
                "--max-records", "50") as s:
        yield s


def err(r: requests.Response) -> dict:
    return r.json()["error"]


def test_healthz_and_unknown_route(srv):
    h = requests.get(srv.url + "/healthz").json()
    assert h["status"] == "ok" and {"subscriptions", "window", "position"} <= set(h)
    r = requests.get(srv.url + "/nowhere")
    assert r.status_code == 404 and err(r)["code"] == "E090"
    r = requests.post(srv.url + "/healthz")
    assert r.status_code == 404


def test_subscription_lifecycle_and_bad_input(srv):
    url = srv.url + "/v1/subscriptions/"
    rec = {"x": 1.0, "y": 2.0, "k": 2, "alpha": 0.5, "text": "pizza"}
    r = requests.put(url + "101", json=rec)
    assert r.status_code == 201 and r.json()["id"] == 101 and r.json()["token"]
    r = requests.put(url + "101", json=dict(rec, k=3))
    assert r.status_code == 200
    got = requests.get(url + "101").json()
    assert got["subscription"]["k"] == 3 and got["result"] == {"id": 101, "topk": got["result"]["topk"]}
    bad = [("101", b"{nope", "E010"), ("101", json.dumps(dict(rec, k=0)).encode(), "E003"),
           ("101", json.dumps(dict(rec, id=7)).encode(), "E100"), ("abc", json.dumps(rec).encode(), "E025"),
           ("101", b"[1, 2]", "E033"), ("101", b"", "E105"),
           ("101", json.dumps(dict(rec, x=1e9)).encode(), "E002")]
    for path, body, code in bad:
        r = requests.put(url + path, data=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and err(r)["code"] == code, (body, r.text)
        assert "line" not in err(r)
    assert requests.get(url + "101").json()["subscription"]["k"] == 3  # unchanged
    assert requests.delete(url + "101").status_code == 200
    for method in (requests.get, requests.delete):
        r = method(url + "101")
        assert r.status_code == 404 and err(r)["code"] == "E020"
    r = requests.get(url + "101/events")
    assert r.status_code == 404


def test_messages_atomic_batch(srv):
    before = requests.get(srv.url + "/healthz").json()["position"]
    good = [{"id": 5000 + i, "x": 0.5, "y": 0.5, "text": "bread"} for i in range(3)]
    bad = good[:2] + [{"id": 5009, "x": 0.5, "y": "north", "text": "bread"}]
    r = requests.post(srv.url + "/v1/messages", data=b"\n" + ndjson(bad), headers=NDJSON)
    assert r.status_code == 400 and err(r)["code"] == "E012" and err(r)["line"] == 4
    assert requests.get(srv.url + "/healthz").json()["position"] == before
    r = requests.post(srv.url + "/v1/messages", data=b'{"id": 1,', headers=NDJSON)
    assert err(r)["code"] == "E010" and err(r)["line"] == 1
    dup = good[:1] + good[:1]
    r = requests.post(srv.url + "/v1/messages", data=ndjson(dup), headers=NDJSON)
    assert r.status_code == 409 and err(r)["code"] == "E019" and err(r)["line"] == 2
    r = requests.post(srv.url + "/v1/messages", json={"id": 1, "x": 0, "y": 0})
    assert r.status_code == 400 and err(r)["code"] == "E013" and "line" not in err(r)
    r = requests.post(srv.url + "/v1/messages", data=ndjson(good), headers=NDJSON)
    assert r.status_code == 200 and r.json() == {"accepted": 3, "position": before + 3}
    r = requests.post(srv.url + "/v1/messages", json=dict(good[0], id=5003))
    assert r.json()["position"] == before + 4
    r = requests.post(srv.url + "/v1/messages", data=ndjson(good[:1] * 51), headers=NDJSON)
    assert r.status_code == 413 and err(r)["code"] == "E092"
    r = requests.post(srv.url + "/v1/messages", data=b" " * 20001, headers=NDJSON)
    assert r.status_code == 413 and err(r)["code"] == "E091"
    assert requests.get(srv.url + "/healthz").json()["position"] == before + 4


def test_query_advance_metrics_page(srv):
    requests.post(srv.url + "/v1/messages", json={"id": 7000, "x": 3.0, "y": 3.0, "text": "tacos"})
    r = requests.post(srv.url + "/v1/query", json={"op": "query", "kind": "range", "rect": [2, 2, 4, 4],
                                                   "text": "tacos"})
    assert r.status_code == 200 and 7000 in r.json()
    assert int(r.headers["X-Skype-Position"]) == requests.get(srv.url + "/healthz").json()["position"]
    for body, code in [({"kind": "nope"}, "E040"), ({"kind": "range", "rect": [4, 4, 2, 2], "text": "x"}, "E042"),
                       ({"op": "sub", "kind": "range"}, "E018")]:
        r = requests.post(srv.url + "/v1/query", json=body)
        assert r.status_code == 400 and err(r)["code"] == code, r.text
    r = requests.post(srv.url + "/v1/advance", json={"t": 10})
    assert r.status_code == 400 and err(r)["code"] == "E023"  # a count window
    r = requests.post(srv.url + "/v1/advance", json={})
    assert err(r)["code"] == "E011"
    text = requests.get(srv.url + "/metrics").text
    for name in ("skype_requests_total", "skype_messages_total", "skype_subscriptions", "skype_events_pushed_total",
                 "skype_connected_clients", "skype_queue_depth", "skype_publish_request_to_write_seconds_bucket",
                 "skype_log_bytes", "skype_fsync_seconds_bucket", "skype_snapshot_age_seconds",
                 "skype_recovery_seconds"):
        assert name in text, name
    assert requests.get(srv.url + "/").status_code == 200
    assert requests.get(srv.url + "/page/..%2Fapp.py").status_code == 404


def test_recent_messages(tmp_path):
    """GET /v1/messages: the newest window messages as published (with their t), newest last."""
    rng = random.Random(11)
    with Server(tmp_path / "data", "--window", "20", "--max-records", "15") as s:
        url = s.url + "/v1/messages"
        assert requests.get(url).text == ""
        recs = [msg_record(i, rng) for i in range(30)]
        recs[27] = {"id": 27, "x": 1.5, "y": -2.5, "terms": {"pizza": 0.25, "bread": 2.0}}
        for i in range(0, 30, 10):
            assert requests.post(url, data=ndjson(recs[i:i + 10]), headers=NDJSON).status_code == 200
        published = [dict(r, t=float(i)) for i, r in enumerate(recs)]  # t defaults to the arrival position

        def last(**params) -> list[dict]:
            r = requests.get(url, params=params)
            assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/x-ndjson")
            return [json.loads(line) for line in r.text.splitlines()]

        assert last(last=7) == published[-7:]
        assert last(last=1) == published[-1:] and last(last=0) == []
        assert last() == published[-15:]              # default 200, capped by --max-records
        assert last(last=10_000) == published[-15:]
        assert last(last=3)[0]["terms"] == {"pizza": 0.25, "bread": 2.0}  # newest last, terms kept
        for bad in ("-1", "abc", "1.5", ""):
            r = requests.get(url, params={"last": bad})
            assert r.status_code == 400 and err(r)["code"] == "E106", (bad, r.text)
        # the window (20 messages) moved on: only the window's messages are listed
        assert requests.post(url, data=ndjson([msg_record(100 + i, rng) for i in range(14)]),
                             headers=NDJSON).status_code == 200
        got = last(last=15)
        assert [m["id"] for m in got] == [29] + list(range(100, 114))  # window: ids 24-29, 100-113


def test_results_equal_reference_and_streams(tmp_path):
    rng = random.Random(7)
    writes: list = []
    with Server(tmp_path / "data", "--window", str(WINDOW), "--snapshot-every", "5") as s:
        for sid in range(1, 13):
            rec = sub_record(sid, rng)
            assert requests.put(f"{s.url}/v1/subscriptions/{sid}", json=rec).status_code == 201
            writes.append(("sub", rec))
        mid = 0
        for step in range(12):
            batch = [msg_record(mid + i, rng) for i in range(rng.randint(1, 15))]
            mid += len(batch)
            if step == 5:  # a rejected batch is not a write
                bad = batch + [dict(batch[0], id=10**6, alpha=1)]
                bad[-1]["x"] = "far"
                assert requests.post(s.url + "/v1/messages", data=ndjson(bad), headers=NDJSON).status_code == 400
            assert requests.post(s.url + "/v1/messages", data=ndjson(batch), headers=NDJSON).status_code == 200
            writes.append(("msgs", batch))
            if step == 8:
                assert requests.delete(f"{s.url}/v1/subscriptions/3").status_code == 200
                writes.append(("unsub", 3))
        want = reference_results(writes, window=WINDOW)
        same_results(server_results(s.url), want)

        # SSE from the start folds into the results; Last-Event-ID resumes with no gap or duplicate
        events = sse_events(s.url, 5, after=0)
        folder = Folder()
        for ev in events:
            folder.apply(ev)
        assert folder.ids()[5] == {e["id"] for e in want[5]["topk"]}
        assert folder.seqs == sorted(set(folder.seqs))
        mid_seq = events[len(events) // 2]["seq"]
        rest = sse_events(s.url, 5, after=mid_seq, header=True)
        assert [e["seq"] for e in rest] == [e["seq"] for e in events if e["seq"] > mid_seq]

        # WebSocket over every live subscription from seq 0: the events fold into every result
        live = sorted(want)
        ws_events = asyncio.run(ws_collect(s.url, live, after=0, until_seq=folder_last(s.url)))
        f = Folder()
        for ev in ws_events:
            f.apply(ev)
        assert f.seqs == sorted(set(f.seqs))
        assert f.ids() == {sid: {e["id"] for e in line["topk"]} for sid, line in want.items()}
    # restart: the same results (snapshot + log tail)
    with Server(tmp_path / "data", "--window", str(WINDOW)) as s:
        same_results(server_results(s.url), want)


def folder_last(url: str) -> int:
    return requests.get(url + "/v1/subscriptions/1").json()["seq"]


def sse_events(url: str, sid: int, after: int, header: bool = False, timeout: float = 1.0) -> list[dict]:
    """Events of one subscription until the stream is quiet for ``timeout`` seconds."""
    headers = {"Last-Event-ID": str(after)} if header else {}
    params = {} if header else {"after": after}
    out = []
    try:
        with requests.get(f"{url}/v1/subscriptions/{sid}/events", params=params, headers=headers, stream=True,
                          timeout=timeout) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    out.append(json.loads(line[6:]))
    except requests.exceptions.ConnectionError:  # read timeout: the stream went quiet
        pass
    return out


async def ws_collect(url: str, subs: list[int], after: int | None, until_seq: int, token: str | None = None,
                     timeout: float = 10.0) -> list[dict]:
    out: list[dict] = []
    ws_url = url.replace("http://", "ws://") + "/v1/events"
    async with websockets.connect(ws_url) as ws:
        req: dict = {"subscribe": subs, "after": after}
        if token:
            req["token"] = token
        await ws.send(json.dumps(req))
        while not out or out[-1]["seq"] < until_seq:
            out.append(json.loads(await asyncio.wait_for(ws.recv(), timeout)))
    return out


def test_reset_when_resuming_too_far_back(tmp_path):
    with Server(tmp_path / "data", "--window", "10", "--retain-events", "3", "--fsync", "always") as s:
        requests.put(s.url + "/v1/subscriptions/1", json={"x": 0, "y": 0, "k": 2, "alpha": 0.5, "text": "apple"})
        for i in range(6):
            requests.post(s.url + "/v1/messages", json={"id": i, "x": (6 - i) / 10, "y": 0, "text": "apple"})
        last = folder_last(s.url)
        events = sse_events(s.url, 1, after=0)
        assert "reset" in events[0] and events[0]["seq"] == last
        assert [e["id"] for e in events[0]["reset"]["topk"]] == [5, 4]
        assert events[1:] == []
        # a WebSocket with a bad request gets an error frame and stays open
        got = asyncio.run(ws_errors(s.url))
        assert [g["error"]["code"] for g in got] == ["E104", "E020", "E023"]


async def ws_errors(url: str) -> list[dict]:
    out = []
    async with websockets.connect(url.replace("http://", "ws://") + "/v1/events") as ws:
        for req in ("nope", json.dumps({"subscribe": [99]}), json.dumps({"subscribe": [1], "after": -1})):
            await ws.send(req)
            out.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
    return out
