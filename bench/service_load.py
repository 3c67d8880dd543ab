"""Load test of the live server (a benchmark, not a test): a publisher at a fixed rate and many
event streams, on 127.0.0.1 only, bounded in time, stopping by itself.

1. Starts ``python -m skype.run serve`` on a free loopback port with a fresh data directory (or
   uses ``--url``, which must be a loopback address), generates a tweets workload
   (``skype.data.workloads``), fills the window with ``--window`` messages (not measured) and
   registers ``--subs`` subscriptions.
2. Opens ``--streams`` event streams, half Server-Sent Events and half WebSocket
   (SSE follows one subscription per connection, so an SSE "stream" is ``--per-stream``
   connections; a WebSocket stream is one connection following ``--per-stream`` subscriptions),
   all from ``after=0``.
3. Publishes NDJSON batches of ``--batch`` messages at ``--rate`` messages per second (0: as
   fast as acknowledgements come) for ``--duration`` seconds, one batch in flight.
4. Drains the streams (until idle for 2 s), then checks them: for every stream, the seqs it
   received against a replay of the same subscriptions from ``after=0`` read afterwards (the
   server retains the events), and its events folded against the final results.

Reports: messages accepted and throughput (msgs/s), acknowledgement latency p50/p99 (a batch sent
to its 200), publish-to-push p50/p99 (a batch sent to an event of it received: an event's
``position`` is the number of messages accepted after the batch that caused it, which names the
batch), events received, lost (in the replay, not received: must be 0), duplicated, streams whose
fold differs from the final results (must be 0), reconnects (slow consumers cut off), and the
server's peak RSS.  Exit code 1 when an event was lost or a fold differs.

    python bench/service_load.py                                   # small: 2k subs, 20 s
    python bench/service_load.py --subs 10000 --streams 100 --rate 5000 --json load.json

Timings on a shared 2-core machine are indicative: client and server share the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from skype import io  # noqa: E402
from skype.client import apply_event  # noqa: E402
from skype.data.workloads import make_workload  # noqa: E402

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def percentiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(np.asarray(values), [50, 99])
    return float(p50), float(p99)


class Stream:
    """One event stream's record: what it received, when, and its reconnects."""

    def __init__(self, name: str, protocol: str, subs: list[int]) -> None:
        self.name, self.protocol, self.subs = name, protocol, subs
        self.events: list[dict] = []
        self.received_at: list[float] = []
        self.reconnects = 0
        self.last_seq: dict[int, int] = {}   # per SSE connection (sub) or the WebSocket (-1)

    def take(self, event: dict, key: int) -> None:
        last = self.last_seq.get(key, 0)
        if event["seq"] <= last:
            return  # a resume overlapped what we had: not delivered twice to the consumer
        self.last_seq[key] = event["seq"]
        self.events.append(event)
        self.received_at.append(time.perf_counter())


async def sse_follow(http: httpx.AsyncClient, stream: Stream, sid: int, stop: asyncio.Event,
                     after: int = 0) -> None:
    """Follow one subscription over SSE from ``after``, resuming after a disconnect."""
    while not stop.is_set():
        try:
            params = {"after": str(stream.last_seq.get(sid, after))}
            async with http.stream("GET", f"/v1/subscriptions/{sid}/events", params=params,
                                   timeout=httpx.Timeout(10.0, read=None)) as resp:
                if resp.status_code != 200:
                    raise RuntimeError(f"SSE {sid}: HTTP {resp.status_code}")
                data: list[str] = []
                async for line in resp.aiter_lines():
                    if line.startswith("data:"):
                        data.append(line[5:].lstrip())
                    elif line == "" and data:
                        obj = json.loads("\n".join(data))
                        data = []
                        if "seq" in obj:
                            stream.take(obj, sid)
        except (httpx.TransportError, RuntimeError):
            pass
        if not stop.is_set():
            stream.reconnects += 1
            await asyncio.sleep(0.1)


async def ws_follow(url: str, stream: Stream, stop: asyncio.Event, after: int = 0) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException

    ws_url = "ws" + url[len("http"):] + "/v1/events"
    while not stop.is_set():
        try:
            async with connect(ws_url, max_size=None, proxy=None) as ws:
                await ws.send(json.dumps({"subscribe": stream.subs, "after": stream.last_seq.get(-1, after)}))
                async for raw in ws:
                    obj = json.loads(raw)
                    if "seq" in obj:
                        stream.take(obj, -1)
        except (WebSocketException, OSError):
            pass
        if not stop.is_set():
            stream.reconnects += 1
            await asyncio.sleep(0.1)


async def replay(url: str, http: httpx.AsyncClient, stream: Stream) -> list[int]:
    """The seqs of the stream's subscriptions from after=0, read now (idle 2 s ends it); when
    the server no longer retains the oldest, the seqs after its reset."""
    copy = Stream(stream.name, stream.protocol, stream.subs)
    stop = asyncio.Event()
    if stream.protocol == "ws":
        tasks = [asyncio.create_task(ws_follow(url, copy, stop))]
    else:
        tasks = [asyncio.create_task(sse_follow(http, copy, sid, stop)) for sid in stream.subs]
    await wait_idle([copy], idle=2.0, limit=60.0)
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    cut = max((ev["seq"] for ev in copy.events if "reset" in ev), default=0)
    return sorted(ev["seq"] for ev in copy.events if ev["seq"] > cut and "reset" not in ev)


async def wait_idle(streams: list[Stream], idle: float, limit: float) -> None:
    start = time.perf_counter()
    counts = None
    quiet_since = time.perf_counter()
    while time.perf_counter() - start < limit:
        now = [len(s.events) for s in streams]
        if now != counts:
            counts, quiet_since = now, time.perf_counter()
        elif time.perf_counter() - quiet_since >= idle:
            return
        await asyncio.sleep(0.1)


async def publish_all(http: httpx.AsyncClient, records: list[dict], batch: int) -> None:
    for i in range(0, len(records), batch):
        body = "\n".join(json.dumps(r) for r in records[i:i + batch]) + "\n"
        while True:
            resp = await http.post("/v1/messages", content=body, headers={"Content-Type": "application/x-ndjson"})
            if resp.status_code != 429:
                resp.raise_for_status()
                break
            await asyncio.sleep(0.05)


async def run(args: argparse.Namespace, url: str, subs: list[dict], msgs: list[dict]) -> dict:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=url, timeout=60.0, limits=limits) as http:
        await publish_all(http, msgs[:args.window], 1000)                    # fill the window
        sem = asyncio.Semaphore(16)

        async def put(rec: dict) -> None:
            async with sem:
                (await http.put(f"/v1/subscriptions/{rec['id']}", json=rec)).raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(put(rec) for rec in subs))
        register_s = time.perf_counter() - t0

        streams = []
        for i in range(args.streams):
            followed = [int(subs[(i * args.per_stream + j) % len(subs)]["id"]) for j in range(args.per_stream)]
            streams.append(Stream(f"s{i}", "sse" if i % 2 == 0 else "ws", followed))
        stop = asyncio.Event()
        tasks = []
        for s in streams:
            if s.protocol == "ws":
                tasks.append(asyncio.create_task(ws_follow(url, s, stop)))
            else:
                tasks += [asyncio.create_task(sse_follow(http, s, sid, stop)) for sid in s.subs]
        await wait_idle(streams, idle=1.0, limit=60.0)     # the creation events are in

        # the publisher: one batch in flight, at a fixed rate
        stream_msgs = msgs[args.window:]
        sent_at: list[float] = []
        end_pos: list[int] = []
        acks: list[float] = []
        interval = args.batch / args.rate if args.rate > 0 else 0.0
        start = time.perf_counter()
        i = 0
        while time.perf_counter() - start < args.duration and i < len(stream_msgs):
            due = start + len(sent_at) * interval
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
            body = "\n".join(json.dumps(r) for r in stream_msgs[i:i + args.batch]) + "\n"
            t_send = time.perf_counter()
            resp = await http.post("/v1/messages", content=body, headers={"Content-Type": "application/x-ndjson"})
            if resp.status_code == 429:
                await asyncio.sleep(0.01)
                continue
            resp.raise_for_status()
            acks.append(time.perf_counter() - t_send)
            sent_at.append(t_send)
            end_pos.append(int(resp.json()["position"]))
            i += args.batch
        publish_s = time.perf_counter() - start
        await wait_idle(streams, idle=2.0, limit=60.0)
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

        # checks: replay and fold
        final = {}
        for s in streams:
            for sid in s.subs:
                if sid not in final:
                    final[sid] = (await http.get(f"/v1/subscriptions/{sid}")).json()["result"]["topk"]
        lost = dupes = bad_folds = resets = 0
        replays = await asyncio.gather(*(replay(url, http, s) for s in streams))
        for s, replayed in zip(streams, replays):
            # resets share the seq their results correspond to (docs/service.md): not events
            seqs = [ev["seq"] for ev in s.events if "reset" not in ev]
            resets += len(s.events) - len(seqs)
            dupes += len(seqs) - len(set(seqs))
            lost += len(set(replayed) - set(seqs))
            state: dict[int, list] = {}
            for ev in sorted(s.events, key=lambda e: e["seq"]):
                apply_event(state, ev)
            bad_folds += any(state.get(sid) != final[sid] for sid in s.subs)

    push = []
    first_pos = end_pos[0] - args.batch if end_pos else 0
    for s in streams:
        for ev, t_recv in zip(s.events, s.received_at):
            if ev["position"] <= first_pos:
                continue  # the fill and the registrations, before the measured stream
            b = bisect.bisect_left(end_pos, ev["position"])
            if b < len(end_pos):
                push.append(t_recv - sent_at[b])
    accepted = (end_pos[-1] - first_pos) if end_pos else 0
    ack50, ack99 = percentiles(acks)
    push50, push99 = percentiles(push)
    return {
        "subscriptions": len(subs), "window": args.window, "streams": args.streams,
        "sse_connections": sum(len(s.subs) for s in streams if s.protocol == "sse"),
        "ws_connections": sum(1 for s in streams if s.protocol == "ws"), "per_stream": args.per_stream,
        "rate_target": args.rate, "batch": args.batch, "duration_s": publish_s, "register_s": register_s,
        "messages": accepted, "throughput_msgs_per_s": accepted / publish_s if publish_s else 0.0,
        "ack_p50_ms": 1e3 * ack50, "ack_p99_ms": 1e3 * ack99,
        "push_p50_ms": 1e3 * push50, "push_p99_ms": 1e3 * push99,
        "events_received": sum(len(s.events) for s in streams), "events_measured": len(push),
        "events_lost": lost, "events_duplicated": dupes, "resets_received": resets, "folds_differing": bad_folds,
        "reconnects": sum(s.reconnects for s in streams),
    }


def start_server(args: argparse.Namespace, data_dir: Path) -> tuple[subprocess.Popen, str, Path]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = data_dir.parent / "server.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "skype.run", "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
           "--port", str(port), "--window", str(args.window), "--fsync", args.fsync,
           "--max-connections", str(max(2048, 4 * args.streams * args.per_stream))]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=2).json().get("status") == "ok":
                return proc, url, log
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start within 120 s")


def peak_rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a running server on loopback (default: start one)")
    p.add_argument("--subs", type=int, default=2000, help="subscriptions (default: %(default)s)")
    p.add_argument("--window", type=int, default=5000, help="count window, filled first (default: %(default)s)")
    p.add_argument("--streams", type=int, default=20, help="event streams, half SSE (default: %(default)s)")
    p.add_argument("--per-stream", type=int, default=10, help="subscriptions per stream (default: %(default)s)")
    p.add_argument("--rate", type=float, default=2000, help="messages per second, 0: unthrottled (default: %(default)s)")
    p.add_argument("--batch", type=int, default=200, help="messages per NDJSON batch (default: %(default)s)")
    p.add_argument("--duration", type=float, default=20.0, help="publishing seconds (default: %(default)s)")
    p.add_argument("--fsync", choices=("always", "batch", "never"), default="batch",
                   help="the started server's policy (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    args = p.parse_args(argv)
    if args.url and urlparse(args.url).hostname not in LOOPBACK:
        p.error("--url must be a loopback address (127.0.0.1, localhost, ::1)")
    rate = args.rate if args.rate > 0 else 20_000
    n_msgs = args.window + int(rate * args.duration * 1.1) + args.batch
    w = make_workload("tweets", num_subs=args.subs, num_messages=n_msgs, seed=args.seed)
    subs = list(io.subscription_objects(w.subscriptions, w.vocabulary))
    msgs = list(io.message_objects(w.messages, w.vocabulary))
    tmp = Path(tempfile.mkdtemp(prefix="skype-load-"))
    proc = None
    try:
        if args.url:
            url = args.url.rstrip("/")
        else:
            proc, url, _ = start_server(args, tmp / "data")
        report = asyncio.run(asyncio.wait_for(run(args, url, subs, msgs), timeout=args.duration + 600))
        if proc is not None:
            report["server_peak_rss_bytes"] = peak_rss(proc.pid)
            report["fsync"] = args.fsync
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    width = max(map(len, report))
    for key, value in report.items():
        shown = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else value
        print(f"{key:<{width}}  {shown}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["events_lost"] or report["folds_differing"] else 0


if __name__ == "__main__":
    sys.exit(main())
