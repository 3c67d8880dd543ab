"""Requests are who they say (issue 34, deliverable 2), against the real server on loopback:
the Host check without tokens (DNS rebinding), Origin on writes and streams (cross-site
requests), Content-Type on writes, query tokens only on the event-stream routes, owner tokens
kept hashed (and an older data directory's plain ones still working), and one answer for a
missing and a forbidden subscription.  Every refused write is checked to have changed nothing."""

from __future__ import annotations

import asyncio
import json

import pytest
import requests

pytest.importorskip("aiohttp")
websockets = pytest.importorskip("websockets")

from service_server import NDJSON, Server, ndjson  # noqa: E402

REC = {"x": 0.0, "y": 0.0, "k": 2, "alpha": 0.5, "text": "pizza"}
MSG = {"id": 1, "x": 0.1, "y": 0.1, "text": "pizza"}
EVIL = "http://evil.example"


def code(r: requests.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


def position(url: str) -> int:
    return requests.get(url + "/healthz").json()["position"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("guard")
    with Server(d / "data", "--window", "20", "--allow-origin", "https://dash.example:8443/") as s:
        yield s


def test_text_plain_post_from_a_foreign_origin_is_refused(srv):
    before = position(srv.url)
    # what any web page can send without a preflight
    r = requests.post(srv.url + "/v1/messages", data=json.dumps(MSG),
                      headers={"Content-Type": "text/plain", "Origin": EVIL})
    assert code(r) == (403, "E146")
    # without an Origin (not a browser) the Content-Type still has to say JSON
    r = requests.post(srv.url + "/v1/messages", data=json.dumps(MSG), headers={"Content-Type": "text/plain"})
    assert code(r) == (415, "E147")
    for ctype in ("application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""):
        r = requests.post(srv.url + "/v1/advance", data=b'{"t": 5}', headers={"Content-Type": ctype})
        assert code(r) == (415, "E147"), ctype
    r = requests.put(srv.url + "/v1/subscriptions/1", data=json.dumps(REC), headers={"Content-Type": "text/plain"})
    assert code(r) == (415, "E147")
    assert position(srv.url) == before and requests.get(srv.url + "/healthz").json()["subscriptions"] == 0
    # the same message as JSON is accepted, with or without charset
    r = requests.post(srv.url + "/v1/messages", data=json.dumps(MSG),
                      headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200 and position(srv.url) == before + 1


def test_foreign_host_is_refused_without_tokens(srv):
    port = srv.port
    for path in ("/healthz", "/v1/results", "/", "/metrics"):
        r = requests.get(srv.url + path, headers={"Host": f"evil.example:{port}"})
        assert code(r) == (421, "E145"), path
    assert code(requests.get(srv.url + "/healthz", headers={"Host": "evil.example"})) == (421, "E145")
    assert code(requests.get(srv.url + "/healthz", headers={"Host": f"localhost:{port + 1}"})) == (421, "E145")
    r = requests.post(srv.url + "/v1/messages", json=dict(MSG, id=2), headers={"Host": f"evil.example:{port}"})
    assert code(r) == (421, "E145")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", f"LocalHost:{port}"):
        assert requests.get(srv.url + "/healthz", headers={"Host": host}).status_code == 200, host


def test_origin_on_writes_and_streams(srv):
    own = f"http://127.0.0.1:{srv.port}"
    url = srv.url + "/v1/subscriptions/5"
    assert requests.put(url, json=REC, headers={"Origin": own}).status_code == 201  # the page's own origin
    for origin in (EVIL, "null", f"http://localhost:{srv.port + 1}", "https://dash.example"):
        assert code(requests.put(url, json=REC, headers={"Origin": origin})) == (403, "E146"), origin
        assert code(requests.delete(url, headers={"Origin": origin})) == (403, "E146"), origin
        r = requests.get(url + "/events", params={"after": 0}, headers={"Origin": origin}, stream=True, timeout=5)
        assert code(r) == (403, "E146"), origin
    # --allow-origin (given with a trailing slash; compared without it, case-insensitively)
    r = requests.put(url, json=dict(REC, k=3), headers={"Origin": "https://Dash.example:8443"})
    assert r.status_code == 200
    with requests.get(url + "/events", params={"after": 0}, headers={"Origin": own}, stream=True, timeout=5) as r:
        assert r.status_code == 200
    # reads need no Origin check: a foreign page cannot read them (no CORS headers)
    assert requests.get(url, headers={"Origin": EVIL}).status_code == 200
    assert requests.get(url).json()["subscription"]["k"] == 3


def test_websocket_from_a_foreign_origin_is_refused(srv):
    ws_url = srv.url.replace("http://", "ws://") + "/v1/events"

    async def attempt(origin: str | None) -> int | str:
        headers = {"Origin": origin} if origin else {}
        try:
            async with websockets.connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
                await ws.send(json.dumps({"subscribe": [5], "after": 0}))
                return json.loads(await asyncio.wait_for(ws.recv(), 10))["sub"]
        except websockets.exceptions.InvalidStatus as err:
            return err.response.status_code

    assert asyncio.run(attempt(EVIL)) == 403
    assert asyncio.run(attempt(f"http://127.0.0.1:{srv.port}")) == 5
    assert asyncio.run(attempt(None)) == 5


def test_query_tokens_only_on_stream_routes(srv):
    assert code(requests.get(srv.url + "/v1/results", params={"token": "x"})) == (400, "E148")
    assert code(requests.post(srv.url + "/v1/advance?token=x", json={"t": 1})) == (400, "E148")
    with requests.get(srv.url + "/v1/subscriptions/5/events", params={"token": "x", "after": 0}, stream=True,
                      timeout=5) as r:
        assert r.status_code == 200  # tokenless: the token is not needed, and not refused


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = tmp_path_factory.mktemp("guard-tokens")
    (d / "tokens.json").write_text(json.dumps({"admin": ["adm-1"], "publisher": ["pub-1"]}))
    with Server(d / "data", "--window", "20", "--token-file", str(d / "tokens.json"), "--snapshot-every", "2") as s:
        yield s


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_missing_and_forbidden_answer_the_same(secured):
    url = secured.url + "/v1/subscriptions/"
    own = requests.put(url + "40", json=REC, headers=bearer("pub-1")).json()["token"]
    other = requests.put(url + "41", json=REC, headers=bearer("pub-1")).json()["token"]
    for sid in (40, 999):  # 40 is someone else's, 999 does not exist: the same answers
        assert code(requests.get(url + f"{sid}", headers=bearer(other))) == (403, "E096"), sid
        assert code(requests.get(url + f"{sid}")) == (401, "E095"), sid
        assert code(requests.delete(url + f"{sid}", headers=bearer(other))) == (403, "E096"), sid
        r = requests.get(url + f"{sid}/events", params={"token": other, "after": 0}, stream=True, timeout=5)
        assert code(r) == (403, "E096"), sid
        r = requests.get(url + f"{sid}/events", params={"after": 0}, stream=True, timeout=5)
        assert code(r) == (401, "E095"), sid
        assert code(requests.get(url + f"{sid}", headers=bearer("pub-1"))) == (403, "E096"), sid
    # who may see it learns whether it exists
    assert requests.get(url + "40", headers=bearer(own)).status_code == 200
    assert code(requests.get(url + "999", headers=bearer("adm-1"))) == (404, "E020")
    assert code(requests.delete(url + "999", headers=bearer("pub-1"))) == (404, "E020")


def test_host_is_not_checked_with_tokens(secured):
    # with tokens the server may sit behind any name (a proxy); the tokens guard it
    r = requests.get(secured.url + "/v1/results", headers={"Host": "skype.example", **bearer("adm-1")})
    assert r.status_code == 200
    assert code(requests.get(secured.url + "/v1/results", headers={"Host": "skype.example"})) == (401, "E095")


def test_owner_tokens_are_stored_hashed(secured):
    url = secured.url + "/v1/subscriptions/"
    created = requests.put(url + "50", json=REC, headers=bearer("pub-1")).json()["token"]
    r = requests.post(secured.url + "/v1/subscriptions", data=ndjson([dict(REC, id=51), dict(REC, id=52)]),
                      headers={**NDJSON, **bearer("pub-1")})
    assert r.status_code == 201
    bulk = r.json()["tokens"]
    for _ in range(3):  # --snapshot-every 2: snapshots are written
        requests.post(secured.url + "/v1/advance", json={"t": 0}, headers=bearer("pub-1"))
    secured.stop()
    secured.start()
    files = [p for p in secured.data_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and any(p.suffix == ".wal" for p in files)
    for token in [created, *bulk]:
        assert not any(token.encode() in p.read_bytes() for p in files), token
    assert any(b"sha256:" in p.read_bytes() for p in files)
    for sid, token in zip((50, 51, 52), [created, *bulk]):
        assert requests.get(url + f"{sid}", headers=bearer(token)).status_code == 200
    assert code(requests.get(url + "51", headers=bearer(created))) == (403, "E096")


def test_older_data_dir_with_plain_owner_tokens(tmp_path):
    """A log written before hashing holds ``{"op": "sub", ..., "token": PLAIN}``: it is
    recovered, and the plain token still owns its subscription."""
    from skype.service.wal import Log

    (tmp_path / "tokens.json").write_text(json.dumps({"publisher": ["pub-1"]}))
    data = tmp_path / "data"
    with Server(data, "--window", "20", "--token-file", str(tmp_path / "tokens.json")):
        pass  # makes the data directory (settings.json, an empty log)
    log = Log(data / "log", "always")
    list(log.recover())
    log.append({"op": "sub", "rec": dict(REC, id=7), "token": "plain-old-token"})
    log.sync()
    log.close()
    with Server(data, "--window", "20", "--token-file", str(tmp_path / "tokens.json")) as s:
        url = s.url + "/v1/subscriptions/7"
        assert requests.get(url, headers=bearer("plain-old-token")).json()["subscription"]["id"] == 7
        assert code(requests.get(url, headers=bearer("another"))) == (403, "E096")


def test_older_snapshot_with_plain_owner_tokens():
    """A snapshot written before hashing holds plain owner tokens: restored, they are hashed
    (and a hash stays a hash, an empty owner stays empty)."""
    from skype.reference import ReferenceEngine
    from skype.service.auth import Tokens, owner_hash
    from skype.service.state import State

    state = State(lambda v: ReferenceEngine(window=5, vocabulary=v))
    meta = state.meta()
    subs = ([1, 2, 3], [json.dumps(dict(REC, id=i)).encode() for i in (1, 2, 3)],
            ["plain-old-token", owner_hash("newer"), ""])
    state.restore(meta, subs, ([], []))
    assert state.tokens == {1: owner_hash("plain-old-token"), 2: owner_hash("newer"), 3: ""}
    tokens = Tokens(["adm"], [])
    assert tokens.is_owner("plain-old-token", state.tokens[1]) and tokens.is_owner("newer", state.tokens[2])
    assert not tokens.is_owner("", state.tokens[3]) and not tokens.is_owner(owner_hash("newer"), state.tokens[2])
