"""``serve --engine spark`` (issue 37): the service's HTTP contract over DSkype on Spark.

The same HTTP calls go to a single-process server (``--engine core``) and to a Spark one; once
the Spark one's folded batches cover every acknowledged message (``skype_spark_position``), both
answer the same results.  One SSE stream following every subscription from ``after=0`` folds to
those results, with seqs 1, 2, ... without a gap.  Snapshot queries (range, knn, topk; with and
without terms, ``last``, before any message) answer what the single-process server answers at the
same position, to the bit, also when asked while the driver is dead.  Then the driver alone is
SIGKILLed, then the service (its driver dies with it): after each, nothing acknowledged is lost,
the results still equal the single-process server's, and the events read again from ``after=0``
are the ones read before, seq for seq.  Real subprocesses throughout (the Spark driver is the
service's child).

That whole test starts three drivers: it runs in the Spark lane (marker ``spark_lane``,
``python -m pytest -m spark_lane``).  The default run keeps a smoke of one driver: writes of every
kind, snapshot queries, results equal to the single-process server's to the bit, one SSE stream
folding to them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

pytest.importorskip("aiohttp")
pytest.importorskip("pyspark")

from service_server import NDJSON, Folder, Server, ndjson, same_results, server_results  # noqa: E402

pytestmark = pytest.mark.spark

WINDOW = 60
WORDS = ["pizza", "pasta", "sushi", "ramen", "tacos", "curry", "bread"]


def sub_record(sid: int, rng: random.Random) -> dict:
    return {"id": sid, "x": rng.uniform(-10, 10), "y": rng.uniform(-10, 10), "k": rng.randint(1, 4),
            "alpha": rng.uniform(0.1, 0.9), "text": " ".join(rng.sample(WORDS, rng.randint(1, 2)))}


def msg_record(mid: int, rng: random.Random) -> dict:
    """Message ``mid`` at ``t = mid`` (both servers see the same times: queries with ``last``)."""
    return {"id": mid, "x": rng.uniform(-10, 10), "y": rng.uniform(-10, 10), "t": float(mid),
            "text": " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))}


def query_records(rng: random.Random, n: int) -> list[dict]:
    """Snapshot queries of the kinds the Spark service answers: range and knn with and without
    terms, topk, an expression, ``last`` (times are message ids), an empty corner, a term no
    message holds."""
    out: list[dict] = []
    for i in range(n):
        x, y = rng.uniform(-10, 10), rng.uniform(-10, 10)
        text = " ".join(rng.sample(WORDS, rng.randint(1, 2)))
        kind = ("range", "knn", "topk")[i % 3]
        if kind == "range":
            w = rng.uniform(1, 12)
            q: dict = {"kind": "range", "rect": [x - w, y - w, x + w, y + w]}
        elif kind == "knn":
            q = {"kind": "knn", "x": x, "y": y, "k": rng.randint(1, 8)}
        else:
            q = {"kind": "topk", "x": x, "y": y, "k": rng.randint(1, 8), "alpha": rng.uniform(0.1, 0.9)}
        if kind == "topk" or rng.random() < 0.5:
            q["text"] = text
        if rng.random() < 0.4:
            q["last"] = rng.choice([0.5, 7.0, 25.5, 1000.0])
        out.append(dict(q, qid=len(out) + 1))
    return out + [{"qid": 900, "kind": "range", "rect": [-10, -10, 10, 10], "match": "pizza AND (sushi OR ramen)"},
                  {"qid": 901, "kind": "knn", "x": 10, "y": 10, "k": 3, "text": "noodles"},  # no message holds it
                  {"qid": 902, "kind": "range", "rect": [9.99, 9.99, 10, 10]}]


def spark_position(url: str) -> float:
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("skype_spark_position "):
            return float(line.split()[1])
    raise AssertionError("no skype_spark_position in /metrics")


def wait_caught_up(url: str, position: int, timeout: float = 900.0) -> None:
    """Until the folded batches cover ``position`` messages, and one more trigger has passed
    (commands after the last message ride in the next batch)."""
    deadline = time.monotonic() + timeout
    while spark_position(url) < position:
        assert time.monotonic() < deadline, f"Spark did not reach position {position} in {timeout} s"
        time.sleep(0.5)
    time.sleep(3.0)


def all_events(url: str, subs: list[int], after: int = 0, quiet: float = 2.0) -> list[dict]:
    """The events of ``subs`` after ``after`` on one SSE stream, until it is quiet for ``quiet`` s."""
    out = []
    try:
        with requests.get(url + "/v1/events", params={"sub": subs, "after": after}, stream=True, timeout=quiet) as r:
            assert r.status_code == 200, r.text
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    out.append(json.loads(line[6:]))
    except requests.exceptions.ConnectionError:  # the read timed out: the stream went quiet
        pass
    return out


def folded(events: list[dict]) -> dict[int, dict[int, float]]:
    f = Folder()
    for ev in events:
        f.apply(ev)
    return {sid: {i: e["score"] for i, e in r.items()} for sid, r in f.results.items()}


def result_entries(results: dict[int, dict], ids: list[int]) -> dict[int, dict[int, float]]:
    return {sid: {e["id"]: e["score"] for e in results[sid]["topk"]} for sid in ids}


def increasing(events: list[dict]) -> int:
    """The stream's seqs increase (it follows some subscriptions: a subset of 1, 2, ...); the last."""
    seqs = [ev["seq"] for ev in events]
    assert seqs == sorted(set(seqs)), seqs
    return seqs[-1] if seqs else 0


class Twin:
    """The same calls to both servers; each must answer alike."""

    def __init__(self, core: Server, spark: Server) -> None:
        self.core, self.spark = core, spark
        self.position = 0

    def call(self, method: str, path: str, body: bytes | None = None) -> list[requests.Response]:
        out = []
        for s in (self.core, self.spark):
            r = requests.request(method, s.url + path, data=body, headers=NDJSON if body is not None else {}, timeout=60)
            out.append(r)
        assert out[0].status_code == out[1].status_code, (out[0].text, out[1].text)
        return out

    def messages(self, recs: list[dict]) -> None:
        core, spark = self.call("POST", "/v1/messages", ndjson(recs))
        assert core.status_code == 200 and core.json() == spark.json()
        self.position = core.json()["position"]

    def queries(self, recs: list[dict]) -> None:
        """The same snapshot queries, at the same position: the core server answers each at once,
        the Spark one once the batch that holds it completes (all of them asked together)."""
        want = [requests.post(self.core.url + "/v1/query", json=q, timeout=60) for q in recs]
        with ThreadPoolExecutor(len(recs)) as pool:
            got = list(pool.map(lambda q: requests.post(self.spark.url + "/v1/query", json=q, timeout=900), recs))
        for q, w, g in zip(recs, want, got):
            assert w.status_code == 200 and g.status_code == 200, (q, w.text, g.text)
            assert g.headers["X-Skype-Position"] == w.headers["X-Skype-Position"] == str(self.position)
            assert g.json() == w.json(), q  # to the bit, in the same order
        assert self.position == 0 or sum(bool(w.json()) for w in want) >= len(recs) // 2  # answers, not empties

    def same(self) -> dict[int, dict]:
        wait_caught_up(self.spark.url, self.position)
        want = server_results(self.core.url)
        got = server_results(self.spark.url)
        same_results(got, want)
        assert got == want  # to the bit: the partitions score with the service's own weights
        return got


def test_spark_service_smoke_equals_the_single_process_service(tmp_path):
    """One driver, no kill: subscriptions in bulk and by PUT, a replaced one, a deleted one,
    messages in batches, snapshot queries (range, knn, topk) at the acknowledged position; the results
    equal the single-process server's to the bit and one SSE stream of every live subscription
    folds to them, its seqs increasing."""
    rng = random.Random(38)
    subs = [sub_record(sid, rng) for sid in rng.sample(range(1, 5000), 30)]
    next_msg = iter(range(1, 10_000))
    with Server(tmp_path / "core", "--window", str(WINDOW)) as core, \
            Server(tmp_path / "spark", "--window", str(WINDOW), "--engine", "spark", "--partitions", "2",
                   "--trigger-ms", "300", "--query-timeout-s", "900") as spark:  # a bound, not a timing
        twin = Twin(core, spark)
        created = twin.call("POST", "/v1/subscriptions", ndjson(subs[:25]))
        assert created[0].status_code == 201 and created[0].json()["ids"] == created[1].json()["ids"]
        twin.messages([msg_record(next(next_msg), rng) for _ in range(40)])
        for rec in subs[25:]:
            twin.call("PUT", f"/v1/subscriptions/{rec['id']}", json.dumps(rec).encode())
        twin.call("PUT", f"/v1/subscriptions/{subs[0]['id']}", json.dumps(dict(subs[0], k=4, text="pizza")).encode())
        assert twin.call("DELETE", f"/v1/subscriptions/{subs[1]['id']}")[1].status_code == 200
        twin.messages([msg_record(next(next_msg), rng) for _ in range(40)])
        twin.queries(query_records(rng, 6))
        results = twin.same()
        ids = sorted(rec["id"] for rec in subs if rec["id"] != subs[1]["id"])
        events = all_events(spark.url, ids)
        assert increasing(events) > 0
        assert folded(events) == result_entries(results, ids)


@pytest.mark.spark_lane
def test_spark_service_equals_the_single_process_service_and_survives_kills(tmp_path):
    rng = random.Random(37)
    subs = [sub_record(sid, rng) for sid in rng.sample(range(1, 5000), 60)]
    next_msg = iter(range(1, 10_000))
    with Server(tmp_path / "core", "--window", str(WINDOW)) as core, \
            Server(tmp_path / "spark", "--window", str(WINDOW), "--engine", "spark", "--partitions", "2",
                   "--trigger-ms", "300", "--query-timeout-s", "900") as spark:  # a bound, not a timing
        twin = Twin(core, spark)
        twin.queries(query_records(rng, 3))  # before any message: answered at once, empty
        created = twin.call("POST", "/v1/subscriptions", ndjson(subs[:50]))
        assert created[0].status_code == 201 and created[0].json()["ids"] == created[1].json()["ids"]
        for _ in range(3):
            twin.messages([msg_record(next(next_msg), rng) for _ in range(40)])
        for rec in subs[50:55]:  # single PUTs between batches, and one replaced record
            twin.call("PUT", f"/v1/subscriptions/{rec['id']}", json.dumps(rec).encode())
        twin.messages([msg_record(next(next_msg), rng) for _ in range(40)])
        replaced = dict(subs[0], k=4, text="pizza sushi")
        twin.call("PUT", f"/v1/subscriptions/{subs[0]['id']}", json.dumps(replaced).encode())
        assert twin.call("DELETE", f"/v1/subscriptions/{subs[1]['id']}")[1].status_code == 200
        twin.messages([msg_record(next(next_msg), rng) for _ in range(40)])
        # refused alike, changing nothing: a duplicate id in the window; another kind on Spark
        assert twin.call("POST", "/v1/messages", ndjson([msg_record(twin.position, rng)]))[1].status_code == 409
        r = requests.put(spark.url + "/v1/subscriptions/9999", json={"id": 9999, "kind": "range",
                                                                     "rect": [-5, -5, 5, 5], "text": "pizza"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "E048"
        r = requests.post(spark.url + "/v1/query", json={"kind": "terms", "rect": [-5, -5, 5, 5], "k": 3})
        assert r.status_code == 400 and r.json()["error"]["code"] == "E138"  # terms: no live term names
        bad = [requests.post(u + "/v1/query", json={"kind": "knn", "x": 0, "y": 0, "k": 0}) for u in (core.url, spark.url)]
        assert [r.status_code for r in bad] == [400, 400]  # checked as the core server checks
        assert bad[0].json()["error"]["code"] == bad[1].json()["error"]["code"]
        twin.queries(query_records(rng, 12))  # snapshot queries: DSkype commands at the acknowledged position

        results = twin.same()
        ids = sorted(rec["id"] for rec in subs[:55] if rec["id"] != subs[1]["id"])  # every live subscription
        before = all_events(spark.url, ids)
        last = increasing(before)
        assert 0 < last <= requests.get(spark.url + f"/v1/subscriptions/{subs[2]['id']}").json()["seq"]
        assert folded(before) == result_entries(results, ids)  # every stream folds to the results

        # the driver alone, SIGKILLed: started again, it resumes from its checkpoint
        pid = int((tmp_path / "spark" / "spark" / "driver.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        twin.queries(query_records(rng, 6))  # staged while no driver runs: answered by the next one
        for _ in range(2):
            twin.messages([msg_record(next(next_msg), rng) for _ in range(40)])
        results = twin.same()

        # the service and so its driver: a restart folds the completed batches again
        spark.kill()
        spark.start()
        twin.messages([msg_record(next(next_msg), rng) for _ in range(40)])
        results = twin.same()
        again = all_events(spark.url, ids)
        increasing(again)
        assert again[:len(before)] == before  # the events kept their seqs
        tail = all_events(spark.url, ids, after=last)  # and resume exactly after the last one read
        assert tail == again[len(before):]
        assert folded(again) == result_entries(results, ids)
