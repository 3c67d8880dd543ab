"""Auth and limits of ``skype.run serve``: publisher, admin and owner tokens on every route,
loopback only without a token file, connection and per-connection stream limits."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
import requests

pytest.importorskip("aiohttp")
websockets = pytest.importorskip("websockets")

from service_server import NDJSON, ROOT, Server, ndjson  # noqa: E402

REC = {"x": 0.0, "y": 0.0, "k": 2, "alpha": 0.5, "text": "pizza"}


def bearer(token: str | None) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


def code(r: requests.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("auth")
    (d / "tokens.json").write_text(json.dumps({"admin": ["adm-1"], "publisher": ["pub-1", "pub-2"]}))
    with Server(d / "data", "--window", "20", "--token-file", str(d / "tokens.json"),
                "--max-streams-per-connection", "2") as s:
        yield s


def test_writes_need_a_publisher(srv):
    url = srv.url + "/v1/subscriptions/1"
    assert code(requests.put(url, json=REC)) == (401, "E095")
    assert code(requests.put(url, json=REC, headers=bearer("nobody"))) == (403, "E096")
    msg = {"id": 1, "x": 0.1, "y": 0.1, "text": "pizza"}
    assert code(requests.post(srv.url + "/v1/messages", json=msg)) == (401, "E095")
    assert code(requests.post(srv.url + "/v1/messages", data=ndjson([msg]), headers=NDJSON)) == (401, "E095")
    assert code(requests.post(srv.url + "/v1/query", json={"kind": "range", "rect": [0, 0, 1, 1], "text": "x"})) \
        == (401, "E095")
    assert code(requests.post(srv.url + "/v1/advance", json={"t": 1})) == (401, "E095")
    assert requests.get(srv.url + "/healthz").json()["position"] == 0  # nothing changed


def test_owner_token_reads_its_subscription_only(srv):
    r1 = requests.put(srv.url + "/v1/subscriptions/11", json=REC, headers=bearer("pub-1"))
    r2 = requests.put(srv.url + "/v1/subscriptions/12", json=REC, headers=bearer("pub-2"))
    assert r1.status_code == r2.status_code == 201
    own1, own2 = r1.json()["token"], r2.json()["token"]
    assert own1 != own2
    msg = {"id": 100, "x": 0.1, "y": 0.1, "text": "pizza"}
    assert requests.post(srv.url + "/v1/messages", json=msg, headers=bearer("pub-1")).status_code == 200
    url = srv.url + "/v1/subscriptions/11"
    assert requests.get(url, headers=bearer(own1)).json()["result"]["topk"][0]["id"] == 100
    assert requests.get(url, headers=bearer("adm-1")).status_code == 200
    assert code(requests.get(url)) == (401, "E095")
    assert code(requests.get(url, headers=bearer(own2))) == (403, "E096")
    assert code(requests.get(url, headers=bearer("pub-1"))) == (403, "E096")
    assert code(requests.get(url + "/events", params={"token": own2})) == (403, "E096")
    with requests.get(url + "/events", params={"token": own1, "after": 0}, stream=True, timeout=5) as r:
        assert r.status_code == 200
        first = next(line for line in r.iter_lines() if line.startswith(b"data: "))
        assert json.loads(first[6:])["sub"] == 11
    # every result: admin only
    assert code(requests.get(srv.url + "/v1/results", headers=bearer("pub-1"))) == (403, "E096")
    assert requests.get(srv.url + "/v1/results", headers=bearer("adm-1")).status_code == 200
    # replacing keeps the owner token and does not show it (only its creation does); deleting:
    # the owner or a publisher
    r = requests.put(url, json=dict(REC, k=3), headers=bearer("pub-2"))
    assert r.status_code == 200 and "token" not in r.json()
    assert requests.get(url, headers=bearer(own1)).status_code == 200
    assert code(requests.delete(url, headers=bearer(own2))) == (403, "E096")
    assert requests.delete(url, headers=bearer(own1)).status_code == 200
    # WebSocket: the token of the connection or of the request; at most 2 subscriptions
    got = asyncio.run(ws_session(srv.url, own2))
    assert got[0]["error"]["code"] == "E095"
    assert got[1]["sub"] == 12 and got[1]["seq"] > 0
    assert got[2]["error"]["code"] == "E099"


def test_recent_messages_need_a_publisher(srv):
    url = srv.url + "/v1/messages"
    msg = {"id": 300, "x": 0.2, "y": 0.2, "text": "pizza"}
    assert requests.post(url, json=msg, headers=bearer("pub-2")).status_code == 200
    assert code(requests.get(url)) == (401, "E095")
    assert code(requests.get(url, params={"last": 1}, headers=bearer("nobody"))) == (403, "E096")
    own = requests.put(srv.url + "/v1/subscriptions/30", json=REC, headers=bearer("pub-1")).json()["token"]
    assert code(requests.get(url, headers=bearer(own))) == (403, "E096")  # an owner token is not enough
    for tok in ("pub-1", "adm-1"):
        r = requests.get(url, params={"last": 1}, headers=bearer(tok))
        assert r.status_code == 200 and json.loads(r.text) == dict(msg, t=r.json()["t"])
    r = requests.get(url, params={"last": 1, "token": "pub-2"})  # a query token: event streams only
    assert code(r) == (400, "E148")


async def ws_session(url: str, own2: str) -> list[dict]:
    out = []
    ws_url = url.replace("http://", "ws://") + "/v1/events"
    async with websockets.connect(ws_url) as ws:
        await ws.send(json.dumps({"subscribe": [12], "after": 0}))
        out.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
    async with websockets.connect(ws_url + f"?token={own2}") as ws:
        await ws.send(json.dumps({"subscribe": [12], "after": 0}))
        out.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
        await ws.send(json.dumps({"subscribe": [1, 2, 3], "token": "adm-1"}))
        while True:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if "error" in msg:
                out.append(msg)
                break
    return out


def _serve(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "skype.run", "serve", "--data-dir", str(tmp_path / "d"),
                           "--window", "5", "--port", "1", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_refuses_public_host_without_tokens_and_bad_token_files(tmp_path):
    r = _serve(tmp_path, "--host", "0.0.0.0")
    assert r.returncode == 2 and "E097" in r.stderr
    (tmp_path / "bad.json").write_text('{"admin": [""]}')
    r = _serve(tmp_path, "--token-file", str(tmp_path / "bad.json"))
    assert r.returncode == 2 and "E101" in r.stderr
    r = _serve(tmp_path, "--token-file", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "E101" in r.stderr


def test_connection_limit(tmp_path):
    with Server(tmp_path / "data", "--window", "5", "--max-connections", "1") as s:
        requests.put(s.url + "/v1/subscriptions/1", json=REC)
        with requests.get(s.url + "/v1/subscriptions/1/events", stream=True, timeout=5) as stream:
            assert stream.status_code == 200
            assert code(requests.get(s.url + "/v1/subscriptions/1")) == (429, "E098")
            assert requests.get(s.url + "/healthz").status_code == 200
