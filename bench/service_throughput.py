"""Indicative figures of ``skype.run serve`` against ``skype.run simulate`` (issue 24 targets).

One generated tweets workload (exact terms) goes through ``simulate`` and through the service
(subscriptions in one bulk NDJSON POST, then the stream POSTed as NDJSON batches by one publisher, each
batch sent when the previous one is acknowledged).  Reports both throughputs, acknowledgement
latency p50/p99, the peak RSS of both processes, and the time the service takes to answer
``/healthz`` again after a SIGKILL (no snapshot: the whole log replayed) and after a
SIGTERM (from the snapshot it wrote).  Loopback only; stops by itself.

    PYTHONPATH=. python bench/service_throughput.py --subs 20000 --messages 60000 --window 20000
    PYTHONPATH=. python bench/service_throughput.py ... --ingest records   # design 1, to compare
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

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


STARTED: list[subprocess.Popen] = []
TMP = Path(tempfile.mkdtemp(prefix="skype-serve-bench-"))


def start(data: Path, port: int, args: list[str]) -> subprocess.Popen:
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=20_000)
    ap.add_argument("--messages", type=int, default=60_000)
    ap.add_argument("--window", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fsync", default="batch")
    ap.add_argument("--ingest", choices=("columnar", "records"), default="columnar",
                    help="the server's --ingest: design 2 (columnar, default) or design 1 (records), to A/B them")
    ap.add_argument("--snapshot-every", type=int, default=20_000,
                    help="the server's option (default: its default); a huge value times a full log replay")
    ap.add_argument("--queries", choices=("lazy", "eager"), default="lazy",
                    help="the server's --queries (default: lazy, the server's default), to A/B the query window")
    ap.add_argument("--index", help="the engine's index, given to simulate and to the server alike (default: their "
                    "defaults; the report names simulate's engine)")
    a = ap.parse_args()
    engine_args = ["--index", a.index] if a.index else []
    tmp = TMP
    m, s = tmp / "m.jsonl", tmp / "s.jsonl"
    subprocess.run([sys.executable, "-m", "skype.run", "generate", "--dataset", "tweets", "--num-subs", str(a.subs),
                    "--num-messages", str(a.messages), "--messages-out", str(m), "--subscriptions-out", str(s)],
                   env=ENV, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "skype.run", "simulate", "--messages", str(m), "--subscriptions", str(s),
                    "--window", str(a.window), "--metrics-out", str(tmp / "sim.json"), "--no-progress", *engine_args],
                   env=ENV, check=True, capture_output=True)
    sim = json.loads((tmp / "sim.json").read_text())

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["--window", str(a.window), "--fsync", a.fsync, "--snapshot-every", str(a.snapshot_every),
            "--ingest", a.ingest, "--queries", a.queries, *engine_args]
    proc = start(tmp / "data", port, args)
    session = requests.Session()
    t0 = time.perf_counter()
    r = session.post(f"{url}/v1/subscriptions", data=open(s, "rb").read(),  # one bulk call, all or nothing
                     headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code in (200, 201), r.text
    register_s = time.perf_counter() - t0
    lines = open(m, "rb").readlines()
    acks = []
    t0 = time.perf_counter()
    for start_row in range(0, len(lines), a.batch):
        tb = time.perf_counter()
        r = session.post(url + "/v1/messages", data=b"".join(lines[start_row:start_row + a.batch]),
                         headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 200, r.text
        acks.append(time.perf_counter() - tb)
    stream_s = time.perf_counter() - t0
    rss = peak_rss(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t0 = time.perf_counter()
    proc = start(tmp / "data", free_port(), args)
    ready_s = time.perf_counter() - t0
    proc.send_signal(signal.SIGTERM)  # graceful: writes a snapshot
    proc.wait()
    t0 = time.perf_counter()
    proc = start(tmp / "data", free_port(), args)
    ready_snapshot_s = time.perf_counter() - t0
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    serve_tp = len(lines) / stream_s
    print(json.dumps({
        "subscriptions": a.subs, "messages": len(lines), "window": a.window, "batch": a.batch, "fsync": a.fsync, "ingest": a.ingest,
        "simulate_engine": sim.get("engine"), "index": a.index or "default",
        "simulate_msgs_per_s": round(sim["throughput_msgs_per_s"]), "serve_msgs_per_s": round(serve_tp),
        "ratio": round(serve_tp / sim["throughput_msgs_per_s"], 3),
        "ack_p50_ms": round(1e3 * float(np.percentile(acks, 50)), 2),
        "ack_p99_ms": round(1e3 * float(np.percentile(acks, 99)), 2),
        "register_s": round(register_s, 2), "simulate_rss_mb": round(sim["peak_rss_bytes"] / 2**20),
        "serve_rss_mb": round(rss / 2**20), "ready_after_sigkill_s": round(ready_s, 2),
        "ready_from_snapshot_s": round(ready_snapshot_s, 2),
    }, indent=1))


if __name__ == "__main__":
    try:
        main()
    finally:  # stop by itself: no server outlives the bench
        for p in STARTED:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(TMP, ignore_errors=True)
