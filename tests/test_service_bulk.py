"""Bulk and paginated calls of ``python -m skype.run serve`` (issue 34, deliverable 5), against
the real server, results checked against the reference engine over the acknowledged writes:
NDJSON bulk subscribe (all or nothing, a bad record named by its line, one log record, durable
across SIGKILL, creation events), bulk delete, ``GET /v1/subscriptions?after&limit``, paginated
``/v1/results``, ``GET /v1/messages?ids=``, and the Python client's use of them."""

from __future__ import annotations

import json
import random

import pytest
import requests

pytest.importorskip("aiohttp")

from service_server import NDJSON, Server, check_stream, ndjson, reference_results, same_results, server_results  # noqa: E402

from skype.client import Client, ServiceError  # noqa: E402
from skype.service.wal import Log  # noqa: E402

WINDOW = 30
WORDS = ["pizza", "pasta", "sushi", "ramen", "tacos", "curry", "bread"]


def sub_record(sid: int, rng: random.Random) -> dict:
    rec = {"id": sid, "x": rng.uniform(-10, 10), "y": rng.uniform(-10, 10), "k": rng.randint(1, 4),
           "alpha": rng.uniform(0.1, 0.9), "text": " ".join(rng.sample(WORDS, rng.randint(1, 2)))}
    if rng.random() < 0.2:
        rec["until"] = 1e9
    return rec


def msg_record(mid: int, rng: random.Random) -> dict:
    return {"id": mid, "x": rng.uniform(-10, 10), "y": rng.uniform(-10, 10),
            "text": " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))}


def same_every_kind(got: dict[int, dict], want: dict[int, dict]) -> None:
    """Top-k lines as :func:`same_results` (scores to 1e-9), the other kinds' lines equal."""
    assert sorted(got) == sorted(want)
    topk = [sid for sid, line in want.items() if "topk" in line]
    same_results({sid: got[sid] for sid in topk}, {sid: want[sid] for sid in topk})
    assert all(got[sid] == line for sid, line in want.items() if sid not in topk)


def code(r: requests.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


def post_subs(url: str, recs: list, **headers: str) -> requests.Response:
    return requests.post(url + "/v1/subscriptions", data=ndjson(recs), headers={**NDJSON, **headers})


def listed(url: str, limit: int) -> list[dict]:
    out, after = [], None
    while True:
        params = {"limit": limit} | ({"after": after} if after is not None else {})
        page = requests.get(url + "/v1/subscriptions", params=params).json()
        out.extend(page["subscriptions"])
        if page["next_after"] is None:
            return out
        after = page["next_after"]


@pytest.mark.parametrize("engine", ["core", "reference"])
def test_bulk_subscribe_equals_the_reference_and_survives_a_kill(tmp_path, engine):
    rng = random.Random(7)
    writes: list = []
    msgs = [msg_record(i, rng) for i in range(45)]
    with Server(tmp_path / "d", "--window", str(WINDOW), "--engine", engine) as s:
        assert requests.post(s.url + "/v1/messages", data=ndjson(msgs[:40]), headers=NDJSON).status_code == 200
        writes.append(("msgs", msgs[:40]))
        recs = [sub_record(sid, rng) for sid in rng.sample(range(1, 10_000), 120)]
        recs.append({"id": 20_000, "kind": "range", "rect": [-5, -5, 5, 5], "text": "pizza"})
        r = post_subs(s.url, recs)
        assert r.status_code == 201, r.text
        answer = r.json()
        assert answer["created"] == len(recs) and answer["ids"] == [rec["id"] for rec in recs]
        assert len(set(answer["tokens"])) == len(recs) and answer["position"] == 40
        writes += [("sub", rec) for rec in recs]
        same_every_kind(server_results(s.url), reference_results(writes, window=WINDOW))
        # one creation event per record, ascending id, consecutive seqs, carrying the initial result
        sid = min(rec["id"] for rec in recs)
        with requests.get(s.url + f"/v1/subscriptions/{sid}/events", params={"after": 0}, stream=True,
                          timeout=10) as stream:
            first = next(json.loads(line[6:]) for line in stream.iter_lines() if line.startswith(b"data: "))
        want = reference_results(writes, window=WINDOW)[sid]["topk"]
        assert first["sub"] == sid and [e["id"] for e in first["entered"]] == [e["id"] for e in want]
        assert first["left"] == []
        # more messages move the new subscriptions' results as any others
        assert requests.post(s.url + "/v1/messages", data=ndjson(msgs[40:]), headers=NDJSON).status_code == 200
        writes.append(("msgs", msgs[40:]))
        s.kill()
        # the bulk call is one log record, holding the owners' hashes, not their tokens
        logged = [cmd for _, cmd in Log(s.data_dir / "log", "never").recover()]
        assert [cmd["op"] for cmd in logged] == ["msgs", "subs", "msgs"]
        assert all(h.startswith("sha256:") for h in logged[1]["token_hashes"])
        s.start()
        same_every_kind(server_results(s.url), reference_results(writes, window=WINDOW))
        assert sorted(rec["id"] for rec in listed(s.url, 17)) == sorted(rec["id"] for rec in recs)


def test_bulk_subscribe_is_all_or_nothing(tmp_path):
    rng = random.Random(3)
    with Server(tmp_path / "d", "--window", str(WINDOW), "--max-records", "50") as s:
        assert requests.put(s.url + "/v1/subscriptions/5", json=sub_record(5, rng)).status_code == 201
        assert requests.post(s.url + "/v1/messages", json=msg_record(1, rng)).status_code == 200  # clock 0
        good = [sub_record(sid, rng) for sid in range(100, 110)]
        cases = [
            (good[:4] + [dict(good[4], k=0)] + good[5:], 400, "E003", 5),
            (good[:6] + [dict(good[6], x="east")] + good[7:], 400, "E012", 7),
            (good + [sub_record(5, rng)], 409, "E007", 11),           # taken already
            (good[:3] + [good[1]], 409, "E007", 4),                   # repeated in the body
            (good[:2] + [[1, 2]], 400, "E033", 3),
            (good[:2] + [dict(good[2], op="unsub")], 400, "E018", 3),
            (good[:1] + [dict(good[1], until=-1.0)], 400, "E043", 2),
        ]
        for recs, status, err, line in cases:
            r = post_subs(s.url, recs)
            assert code(r) == (status, err), (err, r.text)
            assert r.json()["error"]["line"] == line, r.text
        r = requests.post(s.url + "/v1/subscriptions", data=b'{"id": 1, "x": 0}\n{nope\n', headers=NDJSON)
        assert code(r) == (400, "E010") and r.json()["error"]["line"] == 2
        r = post_subs(s.url, [sub_record(i, rng) for i in range(200, 251)])
        assert code(r) == (413, "E092")
        assert code(requests.post(s.url + "/v1/subscriptions", data=b"\n\n", headers=NDJSON)) == (400, "E105")
        r = requests.post(s.url + "/v1/subscriptions", json=good[0])  # one JSON object: use PUT
        assert code(r) == (415, "E147")
        assert [rec["id"] for rec in listed(s.url, 10)] == [5]  # nothing of the refused bodies
        assert requests.get(s.url + "/healthz").json()["subscriptions"] == 1
        r = post_subs(s.url, good)
        assert r.status_code == 201 and r.json()["created"] == 10
        assert [rec["id"] for rec in listed(s.url, 4)] == [5] + list(range(100, 110))


def test_bulk_delete_and_pages(tmp_path):
    rng = random.Random(11)
    writes: list = []
    with Server(tmp_path / "d", "--window", str(WINDOW)) as s:
        recs = [sub_record(sid, rng) for sid in range(1, 61)]
        assert post_subs(s.url, recs).status_code == 201
        writes += [("sub", rec) for rec in recs]
        msgs = [msg_record(i, rng) for i in range(50)]
        requests.post(s.url + "/v1/messages", data=ndjson(msgs), headers=NDJSON)
        writes.append(("msgs", msgs))
        # atomic: an unknown id deletes nothing
        r = requests.delete(s.url + "/v1/subscriptions", json={"ids": [1, 2, 999]})
        assert code(r) == (404, "E020") and requests.get(s.url + "/healthz").json()["subscriptions"] == 60
        for body in ({"ids": [1, 1]}, {"ids": []}, {"ids": "1"}, {"id": [1]}, [1]):
            assert code(requests.delete(s.url + "/v1/subscriptions", json=body))[0] == 400, body
        seq = requests.get(s.url + "/v1/subscriptions/3").json()["seq"]
        gone = rng.sample(range(1, 61), 25)
        r = requests.delete(s.url + "/v1/subscriptions", json={"ids": gone})
        assert r.status_code == 200 and r.json()["deleted"] == 25
        writes += [("unsub", sid) for sid in gone]
        want = reference_results(writes, window=WINDOW)
        same_results(server_results(s.url), want)
        # removal events: one per id, ascending, after the seq before the call
        kept = min(set(range(1, 61)) - set(gone))
        assert requests.get(s.url + f"/v1/subscriptions/{kept}").json()["seq"] == seq + 25
        # pages of records and of results cover everything once, in id order
        for limit in (1, 7, 35, 1000):
            assert [rec["id"] for rec in listed(s.url, limit)] == sorted(want)
            lines, after = [], None
            while True:
                params = {"limit": limit} | ({"after": after} if after is not None else {})
                r = requests.get(s.url + "/v1/results", params=params)
                lines += [json.loads(x) for x in r.text.splitlines()]
                after = r.headers.get("X-Skype-Next-After")
                if after is None:
                    break
            assert [line["id"] for line in lines] == sorted(want)
            same_results({line["id"]: line for line in lines}, want)
        page = requests.get(s.url + "/v1/subscriptions", params={"after": 30, "limit": 3}).json()
        assert [rec["id"] for rec in page["subscriptions"]] == [i for i in sorted(want) if i > 30][:3]
        for params in ({"limit": 0}, {"limit": "x"}, {"after": "x"}):
            assert code(requests.get(s.url + "/v1/subscriptions", params=params)) == (400, "E023"), params
            assert code(requests.get(s.url + "/v1/results", params=params)) == (400, "E023"), params


def test_messages_by_id(tmp_path):
    rng = random.Random(5)
    with Server(tmp_path / "d", "--window", "10") as s:
        msgs = [msg_record(i, rng) for i in range(100, 120)]
        requests.post(s.url + "/v1/messages", data=ndjson(msgs), headers=NDJSON)
        r = requests.get(s.url + "/v1/messages", params={"ids": "119,105,112,113,4"})
        got = [json.loads(x) for x in r.text.splitlines()]
        assert [m["id"] for m in got] == [112, 113, 119]  # in the window only, oldest first
        assert {k: got[0][k] for k in ("x", "y", "text")} == {k: msgs[12][k] for k in ("x", "y", "text")}
        assert code(requests.get(s.url + "/v1/messages", params={"ids": "1,a"})) == (400, "E023")


def test_client_uses_bulk_and_pages(tmp_path):
    rng = random.Random(9)
    (tmp_path / "tokens.json").write_text(json.dumps({"admin": ["adm"], "publisher": ["pub"]}))
    with Server(tmp_path / "d", "--window", str(WINDOW), "--token-file", str(tmp_path / "tokens.json")) as s:
        recs = [sub_record(sid, rng) for sid in range(1, 41)]
        with Client(s.url, token="pub") as c:
            assert c.subscribe_many(recs, batch_size=15) == {"created": 40, "position": 0}
            assert sorted(c.owner_tokens) == list(range(1, 41))
            msgs = [msg_record(i, rng) for i in range(60)]
            c.publish(msgs, batch_size=25)
            assert [rec["id"] for rec in c.subscriptions(page_size=9)] == list(range(1, 41))
            assert [m["id"] for m in c.messages(ids=[59, 58, 1])] == [58, 59]
            with pytest.raises(ServiceError) as err:
                c.subscribe_many([sub_record(100 + i, rng) for i in range(10)] + [dict(recs[0])], batch_size=6)
            assert err.value.code == "E007" and err.value.line == 11 and err.value.accepted == 6
            c.unsubscribe_many([100 + i for i in range(6)] + list(range(1, 11)))
        with Client(s.url, token="adm") as admin:
            got = {line["id"]: line for line in admin.results(page_size=7)}
        writes = [("sub", rec) for rec in recs[10:]] + [("msgs", msgs)]
        same_results(got, reference_results(writes, window=WINDOW))
        # an owner token reads its subscription
        with Client(s.url) as owner:
            owner.owner_tokens = {20: c.owner_tokens[20]}
            assert owner.result(20)["subscription"]["id"] == 20


def test_bulk_creation_events_continue_the_stream(tmp_path):
    """Creation and removal events of bulk calls take consecutive seqs between the others'."""
    rng = random.Random(2)
    with Server(tmp_path / "d", "--window", str(WINDOW)) as s:
        requests.put(s.url + "/v1/subscriptions/1", json=sub_record(1, rng))
        assert post_subs(s.url, [sub_record(i, rng) for i in (4, 2, 3)]).status_code == 201
        requests.delete(s.url + "/v1/subscriptions", json={"ids": [3, 2]})
        events = []
        with requests.get(s.url + "/v1/subscriptions/4/events", params={"after": 0}, stream=True,
                          timeout=10) as stream:
            for line in stream.iter_lines():
                if line.startswith(b"data: "):
                    events.append(json.loads(line[6:]))
                    break
        assert events[0]["seq"] == 4  # 1: sub 1; 2, 3, 4: subs 2, 3, 4 in id order
        check_stream(events, after=3)
