"""Test harness for ``python -m skype.run serve``: a real server on loopback, in a subprocess.

:class:`Server` starts it on a free port with ``PYTHONPATH`` at this checkout, waits until
``/healthz`` answers 200, and stops it (SIGTERM, or SIGKILL for the crash tests).  Helpers fold
event streams back into results and compute the reference results over given writes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from skype import io
from skype.reference import ReferenceEngine

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir, self.args = Path(data_dir), list(args)
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log = self.data_dir.parent / f"{self.data_dir.name}.stderr"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> Server:
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-m", "skype.run", "serve", "--data-dir", str(self.data_dir), "--port",
               str(self.port), *self.args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:  # not listening yet, or busy recovering
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become healthy")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()


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
