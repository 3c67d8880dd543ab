"""Test harness for ``python -m skype.run serve``: a real server on loopback, in a subprocess.

:class:`Server` is :class:`tests.service_process.ServerProcess` (a free port, ``PYTHONPATH`` at this
checkout, ready once ``/healthz`` answers ``ok``, stopped by SIGTERM or SIGKILL).  Helpers fold
event streams back into results and compute the reference results over given writes.
"""

from __future__ import annotations

import json

import requests

from tests.service_process import ROOT, ServerProcess  # noqa: F401  (ROOT: for the tests that import it here)

from skype import io
from skype.reference import ReferenceEngine

Server = ServerProcess  # the one process harness of the service tests


def ndjson(records: list) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


NDJSON = {"Content-Type": "application/x-ndjson"}


def reference_results(writes: list[tuple[str, object]], **window) -> dict[int, list]:
    """Results of the reference engine over ``writes``: ("sub", record), ("unsub", id),
    ("msgs", [records]), ("advance", t) in order; {id: results-file line}."""
    ref = ReferenceEngine(**window)
    for op, payload in writes:
        if op == "sub":
            ref.subscribe(io.subscription_from_obj(payload))
        elif op == "unsub":
            ref.unsubscribe(payload)
        elif op == "advance":
            ref.advance(payload)
        else:
            for rec in payload:
                ref.publish(io.message_from_obj(rec))
    return {obj["id"]: obj for obj in io.kind_result_objects(ref.results_by_kind())}


def server_results(url: str, headers: dict | None = None) -> dict[int, dict]:
    r = requests.get(url + "/v1/results", headers=headers or {}, timeout=30)
    assert r.status_code == 200, r.text
    return {obj["id"]: obj for obj in map(json.loads, r.text.splitlines())}


def same_results(got: dict[int, dict], want: dict[int, dict]) -> None:
    assert sorted(got) == sorted(want)
    for sid, line in want.items():
        g = got[sid]["topk"]
        assert [e["id"] for e in g] == [e["id"] for e in line["topk"]], sid
        for a, b in zip(g, line["topk"]):
            assert abs(a["score"] - b["score"]) <= 1e-9


class Folder:
    """Folds event objects into per-subscription results and checks the stream's seqs."""

    def __init__(self) -> None:
        self.results: dict[int, dict[int, dict]] = {}
        self.seqs: list[int] = []
        self.resets = 0

    def apply(self, ev: dict) -> None:
        sid = ev["sub"]
        if "reset" in ev:
            self.resets += 1
            self.results[sid] = {e["id"]: e for e in ev["reset"]["topk"]}
        else:
            cur = self.results.setdefault(sid, {})
            for i in ev["left"]:
                cur.pop(i, None)
            for e in ev["entered"]:
                cur[e["id"]] = e
            if ev.get("removed"):
                del self.results[sid]
        self.seqs.append(ev["seq"])

    def ids(self) -> dict[int, set[int]]:
        return {sid: set(r) for sid, r in self.results.items()}


def check_stream(events: list[dict], after: int = 0) -> int:
    """Event seqs continue ``after`` by one each, except a ``reset`` (all of one resume carry
    the same seq, at least the previous one); returns the last seq."""
    prev = after
    for ev in events:
        if "reset" in ev:
            assert ev["seq"] >= prev, (ev, prev)
        else:
            assert ev["seq"] == prev + 1, (ev["seq"], prev)
        prev = ev["seq"]
    return prev
