"""Bulk subscribe through the live service (issue 34 target: 100k subscriptions into a full 100k
window in at most 5 s), beside the engine's own ``subscribe_batch`` on the same workload.

One generated workload (``--dataset``, exact terms): the server (``python -m skype.run serve``,
its default core engine) gets the messages first, in NDJSON batches, until its count window is
full; then all subscriptions in ONE ``POST /v1/subscriptions`` (NDJSON), timed from the first
byte sent to the acknowledgement (durable: logged and fsynced).  For the floor, the same records
go into an in-process :class:`skype.Engine` with the same window: parse + validate the records,
then ``subscribe_batch`` alone.  Then the server is SIGKILLed and restarted, and the time until
it answers ``/healthz`` again is reported (the bulk record is replayed from the log, or read
from a snapshot).  Loopback only; stops by itself.

    PYTHONPATH=. python bench/service_bulk.py --subs 100000 --messages 100000 --window 100000
    PYTHONPATH=. python bench/service_bulk.py ... --registration replay    # another bulk strategy
    PYTHONPATH=. python bench/service_bulk.py ... --state-ab 2   # in process: columnar vs record checks
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
STARTED: list[subprocess.Popen] = []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def start(data: Path, port: int, args: list[str]) -> subprocess.Popen:
    """The server, once ``/healthz`` answers 200."""
    proc = subprocess.Popen([sys.executable, "-m", "skype.run", "serve", "--data-dir", str(data), "--port",
                             str(port), *args], env=ENV, stderr=subprocess.DEVNULL)
    STARTED.append(proc)
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except requests.RequestException:  # not listening yet, or busy recovering
            pass
        if proc.poll() is not None:
            raise SystemExit("server exited")
        time.sleep(0.05)


def engine_floor(subs_path: Path, msgs_path: Path, window: int, registration: str) -> dict:
    """The in-process engine on the same records: fill the window, then time the bulk path."""
    from skype import io, queries, validate
    from skype.engine import Engine
    from skype.workload import subscriptions_batch

    engine = Engine(window=window, snapshots=True, registration=registration)
    for _, msg in io.read_messages(str(msgs_path)):
        engine.publish(msg)
    t0 = time.perf_counter()
    rows = []
    for line in open(subs_path, "rb"):
        sub = io.subscription_from_obj(json.loads(line))
        rows.append(validate.check_subscription(sub, engine.vocabulary, engine.bounds)
                    + (queries.check_until(sub.until, engine.clock),))
    batch = subscriptions_batch(rows)
    t1 = time.perf_counter()
    engine.subscribe_batch(batch)
    t2 = time.perf_counter()
    return {"parse_validate_s": round(t1 - t0, 2), "subscribe_batch_s": round(t2 - t1, 2)}


def state_ab(subs_path: Path, msgs_path: Path, window: int, registration: str, rounds: int) -> dict:
    """In process, no HTTP: the state's bulk command (``State.apply``: checks, ``subscribe_batch``,
    owner tokens, creation events) with the columnar checks and with the record-by-record ones,
    alternated ``rounds`` times on fresh states with the same full window, so both see the same
    machine load.  Seconds per round, each path."""
    from skype.engine import Engine
    from skype.service import ingest, manysubs
    from skype.service.state import State

    msgs = msgs_path.read_text()
    lines = msgs.splitlines(True)
    body = subs_path.read_text()
    columnar = manysubs.columnar_topk

    def refuse(*args, **kwargs):
        raise ingest.Rejected()

    out: dict[str, list[float]] = {"columnar": [], "records": []}
    for _ in range(rounds):
        for path in ("columnar", "records"):
            manysubs.columnar_topk = columnar if path == "columnar" else refuse  # type: ignore[assignment]
            state = State(lambda v: Engine(window=window, vocabulary=v, snapshots=True, registration=registration))
            for i in range(0, len(lines), 10_000):
                state.apply({"op": "msgs", "ndjson": "".join(lines[i:i + 10_000])})
            t0 = time.perf_counter()
            state.apply({"op": "subs", "ndjson": body})
            out[path].append(round(time.perf_counter() - t0, 2))
            del state
    manysubs.columnar_topk = columnar
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=100_000)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=100_000)
    ap.add_argument("--dataset", default="tweets")
    ap.add_argument("--batch", type=int, default=10_000, help="messages per NDJSON batch while filling")
    ap.add_argument("--no-floor", action="store_true", help="skip the in-process engine's figure")
    ap.add_argument("--state-ab", type=int, default=0, metavar="ROUNDS",
                    help="instead of the server: the state's bulk command in process, columnar checks against "
                         "record-by-record checks, alternated ROUNDS times")
    ap.add_argument("--registration", default="search",
                    help="the engine's bulk registration strategy (serve/simulate --registration), both sides")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skype-bulk-bench-"))
    try:
        m, s = tmp / "m.jsonl", tmp / "s.jsonl"
        subprocess.run([sys.executable, "-m", "skype.run", "generate", "--dataset", a.dataset, "--num-subs",
                        str(a.subs), "--num-messages", str(a.messages), "--messages-out", str(m),
                        "--subscriptions-out", str(s)], env=ENV, check=True, capture_output=True)
        if a.state_ab:
            print(json.dumps({"subscriptions": a.subs, "window": a.window, "registration": a.registration,
                              "state_apply_s": state_ab(s, m, a.window, a.registration, a.state_ab)}, indent=1))
            return
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        args = ["--window", str(a.window), "--max-body-bytes", str(256 << 20), "--max-records",
                str(max(a.subs, a.batch)), "--registration", a.registration]
        proc = start(tmp / "data", port, args)
        session = requests.Session()
        lines = open(m, "rb").readlines()
        for i in range(0, len(lines), a.batch):
            r = session.post(url + "/v1/messages", data=b"".join(lines[i:i + a.batch]),
                             headers={"Content-Type": "application/x-ndjson"})
            assert r.status_code == 200, r.text
        body = open(s, "rb").read()
        t0 = time.perf_counter()
        r = session.post(url + "/v1/subscriptions", data=body, headers={"Content-Type": "application/x-ndjson"})
        bulk_s = time.perf_counter() - t0
        assert r.status_code == 201, r.text[:500]
        health = session.get(url + "/healthz").json()
        rss = peak_rss(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        t0 = time.perf_counter()
        proc = start(tmp / "data", free_port(), args)
        ready_s = time.perf_counter() - t0
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        out = {"subscriptions": a.subs, "registration": a.registration, "window": health["window"], "position": health["position"],
               "body_mb": round(len(body) / 2**20, 1), "bulk_subscribe_s": round(bulk_s, 2),
               "serve_rss_mb": round(rss / 2**20), "ready_after_sigkill_s": round(ready_s, 2)}
        if not a.no_floor:
            out["engine"] = engine_floor(s, m, a.window, a.registration)
        print(json.dumps(out, indent=1))
    finally:  # stop by itself: no server outlives the bench
        for proc in STARTED:
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
