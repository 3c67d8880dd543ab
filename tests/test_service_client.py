"""skype.client against the real server on loopback (``python -m skype.run serve`` in a subprocess).

* Writes through the client give the results the brute-force reference gives over the same
  writes in the same order (the server's vocabulary starts empty and assigns term ids in arrival
  order, as a fresh ReferenceEngine does).
* events(): folding a stream from after=0 gives the server's results, over SSE (one id) and
  WebSocket (many); a stream that lives through a SIGKILL and restart of the server sees every
  event once, in seq order, and still folds to the final results.
* publish(): NDJSON batches of batch_size, a refused batch names its line over the whole call
  and is atomic, and 429 (backpressure) is retried until accepted.
* Tokens: owner tokens kept by the client follow several owners' subscriptions.
* apply_event alone (Hypothesis): net changes fold into each successive ranked result.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skype import io
from skype.client import Client, ServiceError, apply_event
from skype.data.workloads import make_workload
from skype.reference import ReferenceEngine
from skype.text import Vocabulary
from tests.service_process import ServerProcess

WINDOW = 500


@pytest.fixture(scope="module")
def workload():
    w = make_workload("tweets", num_subs=40, num_messages=3000, seed=11)
    subs = list(io.subscription_objects(w.subscriptions, w.vocabulary))
    msgs = list(io.message_objects(w.messages, w.vocabulary))
    return subs, msgs


@pytest.fixture
def server(tmp_path):
    proc = ServerProcess(tmp_path / "data", "--window", str(WINDOW))
    with proc:
        yield proc


def reference_results(steps: list[tuple[str, object]]) -> list[dict]:
    """Results-file lines of the reference after the steps ("sub", record), ("unsub", id), ("msgs", records)."""
    ref = ReferenceEngine(vocabulary=Vocabulary(), window=WINDOW)
    for op, payload in steps:
        if op == "sub":
            ref.subscribe(io.subscription_from_obj(payload))
        elif op == "unsub":
            ref.unsubscribe(payload)
        else:
            for rec in payload:
                ref.publish(io.message_from_obj(rec))
    return sorted(io.result_objects(ref.results()), key=lambda line: line["id"])


def server_results(client: Client) -> list[dict]:
    return sorted(client.results(), key=lambda line: line["id"])


def test_writes_through_the_client_equal_the_reference(server, workload):
    subs, msgs = workload
    client = Client(server.url)
    steps: list[tuple[str, object]] = []
    for rec in subs[:30]:
        answer = client.subscribe(rec)
        assert answer["id"] == rec["id"]
        steps.append(("sub", rec))
    assert client.publish(msgs[:1500], batch_size=400) == 1500
    steps.append(("msgs", msgs[:1500]))
    for sid in (3, 7, 11):
        assert client.unsubscribe(sid)["id"] == sid
        steps.append(("unsub", sid))
    for rec in subs[30:]:  # subscriptions arriving mid-stream get their initial top-k over the window
        client.subscribe(rec)
        steps.append(("sub", rec))
    assert client.publish(msgs[1500:], batch_size=1000) == 3000
    steps.append(("msgs", msgs[1500:]))

    expected = reference_results(steps)
    assert server_results(client) == expected
    for line in expected[:5]:
        got = client.result(line["id"])
        assert got["result"] == line
        assert got["subscription"]["id"] == line["id"]
    health = client.health()
    assert (health["subscriptions"], health["position"]) == (len(expected), 3000)
    with pytest.raises(ServiceError) as err:
        client.result(3)
    assert err.value.status == 404


def fold(events) -> tuple[dict[int, list], list[int]]:
    """The results the events fold to, and their seqs, sorted.  Checks that no seq comes twice
    and that each subscription's events come in seq order (across subscriptions a WebSocket
    following several owners' subscriptions may interleave their replays)."""
    state: dict[int, list] = {}
    seqs = []
    last: dict[int, int] = {}
    for ev in events:
        assert ev["seq"] > last.get(ev["sub"], -1), f"event {ev} out of order or repeated"
        last[ev["sub"]] = ev["seq"]
        seqs.append(ev["seq"])
        apply_event(state, ev)
    assert len(seqs) == len(set(seqs)), "a seq came twice"
    return state, sorted(seqs)


class Consumer(threading.Thread):
    """Collects the events of ``ids`` from ``after`` until the stream is idle for ``idle`` seconds."""

    def __init__(self, url: str, ids, idle: float, after: int | None = 0, transport: str = "auto") -> None:
        super().__init__(daemon=True)
        self.client = Client(url)
        self.ids, self.idle, self.after, self.transport = ids, idle, after, transport
        self.events: list[dict] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for ev in self.client.events(self.ids, after=self.after, idle_timeout=self.idle, reconnect_for=120,
                                         transport=self.transport):
                self.events.append(ev)
        except BaseException as err:  # handed to the test
            self.error = err


def test_events_fold_to_the_results_over_sse_and_websocket(server, workload):
    subs, msgs = workload
    client = Client(server.url)
    for rec in subs[:20]:
        client.subscribe(rec)
    ws = Consumer(server.url, list(range(1, 11)), idle=3.0, transport="websocket")  # one removed mid-stream
    many = Consumer(server.url, list(range(1, 11)), idle=3.0, transport="sse")     # one SSE stream, the same
    sse = Consumer(server.url, 0, idle=3.0)                       # SSE
    gone = Consumer(server.url, 6, idle=3.0)                      # SSE, ends with its removal
    for consumer in (ws, many, sse, gone):
        consumer.start()
    client.publish(msgs[:1000], batch_size=250)
    client.unsubscribe(5)
    client.unsubscribe(6)
    client.publish(msgs[1000:2000], batch_size=250)
    for consumer in (ws, many, sse, gone):
        consumer.join(60)
        assert consumer.error is None and not consumer.is_alive()
    results = {line["id"]: line["topk"] for line in client.results()}

    state, seqs = fold(sse.events)
    assert seqs
    assert state == {0: results[0]}
    state, seqs = fold(ws.events)
    assert state == {i: results[i] for i in range(1, 11) if i not in (5, 6)}
    assert [ev for ev in ws.events if ev["sub"] == 5][-1]["removed"] is True
    assert [ev["seq"] for ev in many.events] == seqs  # one SSE stream: every event once, in seq order
    assert fold(many.events)[0] == state
    assert gone.events[-1]["removed"] is True and fold(gone.events)[0] == {}

    # a stream from after=0 gives the same events, and resuming from the middle exactly the tail
    ids = [i for i in range(1, 11) if i not in (5, 6)]
    _, replay = fold(client.events(ids, after=0, idle_timeout=1.5))
    assert replay == sorted(ev["seq"] for ev in ws.events if ev["sub"] in ids)
    middle = replay[len(replay) // 2]
    _, tail = fold(client.events(ids, after=middle, idle_timeout=1.5))
    assert tail == [s for s in replay if s > middle]


def test_events_resume_across_a_server_kill(server, workload):
    subs, msgs = workload
    client = Client(server.url)
    for rec in subs[:20]:
        client.subscribe(rec)
    ws = Consumer(server.url, list(range(10)), idle=8.0, transport="websocket")
    sse = Consumer(server.url, 12, idle=8.0)
    many = Consumer(server.url, [13, 14, 15], idle=8.0, transport="sse")
    ws.start()
    sse.start()
    many.start()
    client.publish(msgs[:1200], batch_size=100)
    server.kill()                          # every batch so far was acknowledged, so it is in the log
    server.start()
    client.publish(msgs[1200:2400], batch_size=100)
    server.kill()
    server.start()
    client.publish(msgs[2400:], batch_size=100)
    ws.join(120)
    sse.join(120)
    many.join(120)
    assert not ws.is_alive() and not sse.is_alive() and not many.is_alive()
    assert ws.error is None and sse.error is None and many.error is None

    steps = [("sub", rec) for rec in subs[:20]] + [("msgs", msgs)]
    expected = {line["id"]: line["topk"] for line in reference_results(steps)}
    assert {line["id"]: line["topk"] for line in client.results()} == expected
    fresh = Client(server.url)
    for consumer, ids in ((ws, list(range(10))), (sse, [12]), (many, [13, 14, 15])):
        state, seqs = fold(consumer.events)
        assert state == {i: expected[i] for i in ids}
        if not any("reset" in ev for ev in consumer.events):
            # no gap: the same seqs as a stream read after the fact (the server retains them all)
            _, replay = fold(fresh.events(ids if len(ids) > 1 else ids[0], after=0, idle_timeout=1.5))
            assert seqs == replay


class Counting(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = super().handle_request(request)
        self.requests.append((request.method, request.url.path, resp.status_code))
        return resp


def test_publish_batches_and_a_refused_batch_is_atomic_and_names_its_line(server, workload):
    _, msgs = workload
    transport = Counting()
    client = Client(server.url, transport=transport)
    assert client.publish(msgs[:2500], batch_size=1000) == 2500
    assert [r for r in transport.requests if r[1] == "/v1/messages"] == [("POST", "/v1/messages", 200)] * 3

    last_t = msgs[2499]["t"]
    batch = [dict(m, id=10_000 + i, t=last_t + 1 + i) for i, m in enumerate(msgs[:1500])]
    batch[1302]["x"] = "east"               # line 1303 of the call: the second batch (lines 1001-1500) fails
    with pytest.raises(ServiceError) as err:
        client.publish(batch, batch_size=1000)
    assert (err.value.status, err.value.code, err.value.line, err.value.accepted) == (400, "E012", 1303, 1000)
    assert client.health()["position"] == 3500   # the first batch went in, nothing of the second


def test_publish_retries_backpressure_until_accepted(tmp_path, workload):
    """With a one-job engine queue, concurrent publishers meet 429s; every batch goes in once."""
    _, msgs = workload
    with ServerProcess(tmp_path / "data", "--window", str(WINDOW), "--queue-size", "1") as proc:
        transports = [Counting() for _ in range(4)]
        errors: list[BaseException] = []

        def publish(i: int) -> None:
            try:
                # without t (the arrival index stands in), so that interleaved batches stay in order
                part = [{k: v for k, v in m.items() if k != "t"} for m in msgs[i * 750:(i + 1) * 750]]
                Client(proc.url, transport=transports[i]).publish(part, batch_size=25)
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=publish, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        statuses = [s for tr in transports for (_, path, s) in tr.requests if path == "/v1/messages"]
        assert statuses.count(200) == 4 * 30
        assert set(statuses) <= {200, 429}
        print(f"{statuses.count(429)} refusals with 429 retried")  # how many depends on timing
        assert Client(proc.url).health()["position"] == 3000


def test_backpressure_retry_gives_up_with_a_catalogue_error():
    """The client's side of 429 alone (a transport that always refuses): E112 after retry_for."""
    calls = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) <= 2:
            return httpx.Response(429, headers={"Retry-After": "0"},
                                  json={"error": {"code": "E093", "message": "queue full"}})
        return httpx.Response(200, json={"accepted": 1, "position": 1})

    client = Client("http://127.0.0.1:9", transport=httpx.MockTransport(refuse))
    assert client.publish({"id": 1, "x": 0, "y": 0, "terms": {"a": 1}}) == 1
    assert len(calls) == 3

    def always(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"error": {"code": "E093", "message": "queue full"}})

    client = Client("http://127.0.0.1:9", transport=httpx.MockTransport(always), retry_for=0.3)
    with pytest.raises(ServiceError) as err:
        client.publish([{"id": 1, "x": 0, "y": 0, "terms": {"a": 1}}])
    assert (err.value.code, err.value.status) == ("E112", 429)


def test_tokens_owner_tokens_follow_events_without_an_admin(tmp_path, workload):
    """With a token file: no token is refused (401); a publisher's client keeps the owner tokens
    the server issues and follows several owners' subscriptions over one WebSocket and SSE."""
    subs, msgs = workload
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"admin": ["adm"], "publisher": ["pub"]}')
    with ServerProcess(tmp_path / "data", "--window", str(WINDOW), "--token-file", str(tokens)) as proc:
        with pytest.raises(ServiceError) as err:
            Client(proc.url).subscribe(subs[0])
        assert (err.value.status, err.value.code) == (401, "E095")
        client = Client(proc.url, token="pub")
        for rec in subs[:4]:
            assert client.subscribe(rec)["token"]
        assert len(set(client.owner_tokens.values())) == 4
        client.publish(msgs[:1000], batch_size=250)
        expected = {i: client.result(i)["result"]["topk"] for i in range(4)}    # each with its owner token
        assert fold(client.events([0, 1, 2], after=0, idle_timeout=1.5))[0] == {i: expected[i] for i in range(3)}
        assert fold(client.events(3, after=0, idle_timeout=1.5))[0] == {3: expected[3]}
        with pytest.raises(ServiceError) as err:
            Client(proc.url, token="pub").result(0)                             # a publisher is no owner
        assert (err.value.status, err.value.code) == (403, "E096")
        admin = {line["id"]: line["topk"] for line in Client(proc.url, token="adm").results()}
        assert admin == expected


def connected_clients(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("skype_connected_clients "):
            return float(line.split()[1])
    return 0.0


def test_events_from_now_lose_nothing_across_a_restart(server, workload):
    """after=None starts at the server's current seq: a stream connected, then cut by a server
    kill before its first event, still gets every event of the writes after it connected."""
    subs, msgs = workload
    client = Client(server.url)
    for rec in subs[:5]:
        client.subscribe(rec)
    client.publish(msgs[:500], batch_size=250)
    consumer = Consumer(server.url, list(range(5)), idle=8.0, after=None)
    consumer.start()
    deadline = time.monotonic() + 60
    while connected_clients(server.url) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    server.kill()
    server.start()
    client.publish(msgs[500:1500], batch_size=250)
    consumer.join(120)
    assert consumer.error is None and not consumer.is_alive()
    assert consumer.events and all(ev["position"] > 500 for ev in consumer.events)
    state = {line["id"]: line["topk"] for line in reference_results([("sub", r) for r in subs[:5]]
                                                                      + [("msgs", msgs[:500])])}
    for ev in consumer.events:
        apply_event(state, ev)
    assert state == {line["id"]: line["topk"] for line in client.results()}


# --------------------------------------------------------------------------- apply_event alone

topk_states = st.lists(st.lists(st.tuples(st.integers(0, 30), st.floats(0, 1, allow_nan=False)),
                                max_size=8, unique_by=lambda e: e[0]), min_size=1, max_size=8)


@given(topk_states)
@settings(max_examples=200, deadline=None)
def test_apply_event_folds_net_changes_into_the_ranked_result(states):
    """Events shaped as the server makes them (net per write: the ids that left, the entries that
    entered) fold into each successive result, ranked by score; a reset replaces it; removed
    drops it."""
    results: dict[int, list] = {}
    before: list[dict] = []
    for seq, rows in enumerate(states, start=1):
        after = sorted(({"id": i, "score": s} for i, s in rows), key=lambda e: -e["score"])
        old = {e["id"] for e in before}
        left = [e["id"] for e in before if e["id"] not in {a["id"] for a in after}]
        entered = [e for e in after if e["id"] not in old or e not in before]
        left += [e["id"] for e in before if e["id"] in {a["id"] for a in entered} and e["id"] not in left]
        apply_event(results, {"sub": 7, "seq": seq, "position": seq, "entered": entered, "left": left})
        assert [e["score"] for e in results[7]] == [e["score"] for e in after]
        assert sorted(results[7], key=lambda e: e["id"]) == sorted(after, key=lambda e: e["id"])
        before = after
    apply_event(results, {"sub": 7, "seq": 99, "position": 99, "reset": {"id": 7, "topk": [{"id": 1, "score": 0.5}]}})
    assert results[7] == [{"id": 1, "score": 0.5}]
    apply_event(results, {"sub": 7, "seq": 100, "position": 100, "entered": [], "left": [1], "removed": True})
    assert 7 not in results


def test_apply_event_ranks_knn_by_distance_and_terms_by_count():
    results: dict[int, list] = {}
    apply_event(results, {"sub": 1, "seq": 1, "position": 0, "entered": [{"id": 5, "distance": 2.0},
                                                                          {"id": 6, "distance": 1.0}], "left": []},
                kinds={1: "knn"})
    apply_event(results, {"sub": 1, "seq": 2, "position": 1, "entered": [{"id": 7, "distance": 1.5}], "left": [5]},
                kinds={1: "knn"})
    assert results[1] == [{"id": 6, "distance": 1.0}, {"id": 7, "distance": 1.5}]
    apply_event(results, {"sub": 2, "seq": 3, "position": 1, "entered": [{"term": "a", "count": 1},
                                                                          {"term": "b", "count": 3}], "left": []},
                kinds={2: "terms"})
    apply_event(results, {"sub": 2, "seq": 4, "position": 2, "entered": [{"term": "a", "count": 4}], "left": ["a"]},
                kinds={2: "terms"})
    assert results[2] == [{"term": "a", "count": 4}, {"term": "b", "count": 3}]
    apply_event(results, {"sub": 3, "seq": 5, "position": 2, "entered": [4, 2], "left": []}, kinds={3: "range"})
    apply_event(results, {"sub": 3, "seq": 6, "position": 3, "entered": [9], "left": [4]}, kinds={3: "range"})
    assert results[3] == [2, 9]


def fold_with_resets(events) -> dict[int, list]:
    """The results the events fold to.  Each subscription's seqs increase; an event other than a
    reset comes once (the resets of one resume share their seq)."""
    state: dict[int, list] = {}
    last: dict[int, int] = {}
    seen: set[int] = set()
    for ev in events:
        assert ev["seq"] > last.get(ev["sub"], -1), f"event {ev} out of order or repeated"
        last[ev["sub"]] = ev["seq"]
        if "reset" not in ev:
            assert ev["seq"] not in seen, f"event {ev} came twice"
            seen.add(ev["seq"])
        apply_event(state, ev)
    return state


def ws_read(url: str, request: dict, idle: float = 1.5) -> list[dict]:
    """The event objects a WebSocket gets for ``request`` until it is idle for ``idle`` seconds."""
    from websockets.sync.client import connect

    out = []
    with connect(url.replace("http://", "ws://") + "/v1/events", proxy=None) as ws:
        ws.send(json.dumps(request))
        while True:
            try:
                out.append(json.loads(ws.recv(timeout=idle)))
            except TimeoutError:
                return out


def test_a_slow_consumer_with_a_backlog_larger_than_its_queue_makes_progress(tmp_path, workload):
    pytest.importorskip("websockets")
    subs, msgs = workload
    with ServerProcess(tmp_path / "data", "--window", str(WINDOW), "--stream-queue", "2") as server:
        client = Client(server.url)
        for rec in subs[:12]:
            client.subscribe(rec)
        client.publish(msgs[:600], batch_size=100)
        ids = list(range(10))
        results = {line["id"]: line["topk"] for line in client.results()}
        last = client.result(0)["seq"]  # the newest event's seq

        # from after=0 the backlog is far above the queue of 2: one reset per subscription, at once
        got = ws_read(server.url, {"subscribe": ids, "after": 0})
        assert sorted(ev["sub"] for ev in got) == ids and all("reset" in ev and ev["seq"] == last for ev in got)
        assert fold_with_resets(got) == {i: results[i] for i in ids}
        # a backlog that fits the queue is replayed exactly
        tail = ws_read(server.url, {"subscribe": list(range(12)), "after": last - 2})
        assert [ev["seq"] for ev in tail] == [last - 1, last] and not any("reset" in ev for ev in tail)
        # after beyond the newest seq: a reset, not a silent gap
        beyond = ws_read(server.url, {"subscribe": [3], "after": last + 100})
        assert [(ev["sub"], ev["seq"], "reset" in ev) for ev in beyond] == [(3, last, True)]
        assert fold_with_resets(beyond) == {3: results[3]}

        # live: the client, cut off again and again (E103), resumes and folds to the final results
        consumer = Consumer(server.url, ids, idle=4.0)
        consumer.start()
        client.publish(msgs[600:2000], batch_size=50)
        consumer.join(120)
        assert consumer.error is None and not consumer.is_alive()
        final = {line["id"]: line["topk"] for line in client.results()}
        assert fold_with_resets(consumer.events) == {i: final[i] for i in ids}


def test_a_resume_after_a_graceful_restart_needs_no_reset_and_one_before_it_does(server, workload):
    subs, msgs = workload
    client = Client(server.url)
    ids = [0, 1, 2]
    for rec in subs[:3]:
        client.subscribe(rec)
    client.publish(msgs[:300], batch_size=100)
    last = client.result(0)["seq"]
    state = {line["id"]: line["topk"] for line in client.results()}
    server.stop()  # SIGTERM: a snapshot, so no log tail and no retained event
    server.start()
    assert ws_read(server.url, {"subscribe": ids, "after": last}) == []  # up to date: nothing to send
    before = ws_read(server.url, {"subscribe": ids, "after": last - 1})  # not retained: resets
    assert [(ev["sub"], ev["seq"], "reset" in ev) for ev in before] == [(i, last, True) for i in ids]
    client.publish(msgs[300:], batch_size=500)
    events = ws_read(server.url, {"subscribe": ids, "after": last})
    assert not any("reset" in ev for ev in events) and all(ev["seq"] > last for ev in events)
    fold_with_resets(events)  # in order, none twice
    for ev in events:
        apply_event(state, ev)
    assert state == {line["id"]: line["topk"] for line in client.results()}


def test_a_quiet_subscription_resumes_without_a_reset_and_retention_by_age(tmp_path, workload):
    """Subscription 0 is quiet (no event after its creation) while the ring of 50 events turns
    over many times: a resume after its last event is exact, no reset (per-subscription
    watermarks), although the ring no longer reaches back that far; a busy subscription whose
    own events were dropped gets a reset, counted by reason.  Then ``--retain-seconds``: once
    the events are older than that, a resume from before them is a reset."""
    subs, msgs = workload
    far = {"id": 0, "kind": "range", "rect": [179, 89, 180, 90], "text": "zzzquiet"}  # nothing will match it
    with ServerProcess(tmp_path / "data", "--window", str(WINDOW), "--retain-events", "50",
                       "--retain-seconds", "3") as server:
        client = Client(server.url)
        client.subscribe(far)
        created = client.result(0)["seq"]
        for rec in subs[1:20]:
            client.subscribe(rec)
        client.publish(msgs[:1500], batch_size=100)
        last = client.result(0)["seq"]
        assert last > created + 50  # the ring (50 events) turned over
        quiet = ws_read(server.url, {"subscribe": [0], "after": created})
        assert quiet == []  # nothing missed, nothing to send, and no reset
        busy = ws_read(server.url, {"subscribe": [1], "after": created})
        assert [("reset" in ev, ev["seq"]) for ev in busy] == [(True, last)]
        metrics = httpx.get(server.url + "/metrics").text
        assert 'skype_stream_resets_total{reason="evicted"} 1.0' in metrics
        # the client's own resume of several subscriptions: the quiet one is not reset either
        events = list(client.events([0, 1], after=last, idle_timeout=1.0, transport="sse"))
        assert events == []
        # SSE of several subscriptions: resumes after one seq; ids are global seqs
        client.publish(msgs[1500:1600], batch_size=100)
        got = [ev for ev in client.events(list(range(20)), after=last, idle_timeout=1.0, transport="sse")]
        assert all("reset" not in ev and ev["seq"] > last for ev in got)
        # retention by age: 3 s later every retained event is gone: those that moved after `last` reset
        newest = client.result(0)["seq"]
        time.sleep(4.5)
        moved = {ev["sub"] for ev in got}
        assert moved and 0 not in moved  # (the workload is fixed) their events were in the ring ...
        aged = ws_read(server.url, {"subscribe": sorted(moved), "after": last})
        assert {ev["sub"] for ev in aged if "reset" in ev} == moved  # ... and aged out
        assert all(ev["seq"] == newest for ev in aged)
        assert ws_read(server.url, {"subscribe": [0], "after": created}) == []  # still quiet: still exact
