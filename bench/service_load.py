"""Load test of the live server's streams (a benchmark, not a test): a publisher at a fixed rate
and many event streams, on 127.0.0.1 only, bounded in time, stopping by itself.

1. Starts ``python -m skype.run serve`` on a free loopback port with a fresh data directory (or
   uses ``--url``, which must be a loopback address), generates a tweets workload
   (``skype.data.workloads``), fills the window with ``--window`` messages (not measured) and
   registers ``--subs`` subscriptions (``POST /v1/subscriptions`` NDJSON when the server has
   it, else one ``PUT`` each, 32 at a time).
2. Opens ``--streams`` connections of ``--protocol`` (``sse``: one SSE stream of ``--per-stream``
   subscriptions, ``/v1/subscriptions/{id}/events`` for one, ``/v1/events?sub=..`` for more;
   ``ws``: one WebSocket following ``--per-stream``), all from ``after=0``, and waits until every
   one has connected and the server counts them all (``skype_connected_clients``), and the
   streams are idle: nothing is published before.
3. Publishes NDJSON batches of ``--batch`` messages at ``--rate`` messages per second (0: as
   fast as acknowledgements come) for ``--duration`` seconds, one batch in flight, from a
   process of its own (so that the readers do not delay it).
4. Drains the streams (until idle for 2 s), then checks each stream's fold of its events against
   the server's final results (``GET /v1/results``): a stream that lost an event folds to a
   different result.

The readers are aiohttp in ``--readers`` processes of their own (the streams dealt round-robin),
apart from the process that fills, registers, drives and checks.  A reader takes one timestamp per
chunk read and keeps each event's text as it came: nothing is parsed on its loop; every event is
decoded and folded after the run, so the check is unchanged.  Each reader samples its own loop's
lag (how late a 10 ms sleep wakes) and its CPU clock, reported over the publishing interval: a
busiest reader near 1.0 CPU, or a lag near the client's p99, says the client is the bottleneck.
The readers share the cores with the server, so the server's own histogram
(``skype_publish_request_to_write_seconds``, read from ``/metrics`` before and after publishing;
p50/p99 as bucket upper bounds) is reported beside the client's figure.

Reports: messages accepted and throughput (msgs/s), acknowledgement latency p50/p99 (a batch sent
to its 200), publish-to-receive p50/p99 on the client (a batch sent to an event of it received:
an event's ``position`` names the batch), the server's publish-request-to-write p50/p99, events
received, streams whose fold differs from the final results (``lost``: must be 0), duplicates,
resets received, reconnects (disconnects, slow consumers cut off), connect time, and the
server's peak RSS, and the readers' loop lag p50/p99 and busiest CPU share.  Exit code 1 when a
fold differs.

``--mode`` presets the issue's targets (each option may still be overridden):

    python bench/service_load.py --mode sse1k     # 1,000 SSE x 1 sub; 10k subs, window 20k, 2,000 msg/s by 200
    python bench/service_load.py --mode ws1k      # 1,000 WebSockets x 10 subs; the same stream
    python bench/service_load.py --mode sse5k     # 5,000 SSE x 1 sub; 100k subs, window 100k, 1,000 msg/s by 100
    python bench/service_load.py --mode ws1k --readers 2   # the readers in two processes
    python bench/service_load.py --mode spark     # serve --engine spark (local[2], trigger 500 ms): 100 SSE x 1
                                                  # sub; 10k subs, window 10k, 500 msg/s by 100 for 30 s
    python bench/service_load.py --subs 2000 --streams 20 --per-stream 10 --protocol ws   # small

With ``--engine spark`` (``serve --engine spark``, ``--master``, ``--partitions``, ``--method``,
``--trigger-ms``), the fill and the registrations are followed by a wait until the Spark job's
folded batches cover them (``skype_spark_position``; the driver's start and first batch, not
measured), and the drain by a wait until they cover the last message published.

Timings on a shared 2-core machine are indicative: client and server share the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from skype import io  # noqa: E402
from skype.client import apply_event  # noqa: E402
from skype.data.workloads import make_workload  # noqa: E402
from service_readers import Stream, loop_figures, percentiles, reader_main, wait_idle  # noqa: E402  (bench/, beside this file)

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MODES = {
    "sse1k": dict(subs=10_000, window=20_000, streams=1000, per_stream=1, protocol="sse", rate=2000, batch=200,
                  duration=20.0),
    "ws1k": dict(subs=10_000, window=20_000, streams=1000, per_stream=10, protocol="ws", rate=2000, batch=200,
                 duration=20.0),
    "sse5k": dict(subs=100_000, window=100_000, streams=5000, per_stream=1, protocol="sse", rate=1000, batch=100,
                  duration=20.0),
    "spark": dict(subs=10_000, window=10_000, streams=100, per_stream=1, protocol="sse", rate=500, batch=100,
                  duration=30.0, engine="spark"),
}
DEFAULTS = dict(subs=2000, window=5000, streams=20, per_stream=10, protocol="sse", rate=2000, batch=200, duration=20.0,
                engine="core")
HISTOGRAM = "skype_publish_request_to_write_seconds"
COUNTS = ("skype_events_pushed_total", "skype_stream_writes_total", "skype_blocks_delivered_total")


async def metric(session, url: str, name: str) -> float:
    async with session.get(url + "/metrics") as resp:
        for line in (await resp.text()).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


async def histogram(session, url: str) -> dict[float, float]:
    """The server's publish-request-to-write histogram: cumulative count per upper bound."""
    out = {}
    async with session.get(url + "/metrics") as resp:
        for line in (await resp.text()).splitlines():
            m = re.match(HISTOGRAM + r'_bucket\{le="([^"]+)"\} (\S+)', line)
            if m:
                out[float(m.group(1))] = float(m.group(2))
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding quantile ``q`` of the observations in between."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return float("nan")
    for b, c in zip(bounds, counts):
        if c >= q * total:
            return b
    return float("inf")


def publisher(url: str, bodies: list[str], interval: float, duration: float):
    """Post ``bodies`` one at a time, one every ``interval`` s, for ``duration`` s; (start,
    send times, acknowledgement latencies, positions)."""
    sent_at: list[float] = []
    acks: list[float] = []
    end_pos: list[int] = []
    with httpx.Client(base_url=url, timeout=60.0) as http:
        start = time.perf_counter()
        for body in bodies:
            if time.perf_counter() - start >= duration:
                break
            due = start + len(sent_at) * interval
            if due > time.perf_counter():
                time.sleep(due - time.perf_counter())
            t_send = time.perf_counter()
            while True:
                resp = http.post("/v1/messages", content=body.encode(),
                                 headers={"Content-Type": "application/x-ndjson"})
                if resp.status_code != 429:
                    break
                time.sleep(0.01)
            if resp.status_code != 200:
                raise SystemExit(f"publish refused: HTTP {resp.status_code} {resp.text[:300]!r}")
            acks.append(time.perf_counter() - t_send)
            sent_at.append(t_send)
            end_pos.append(int(resp.json()["position"]))
    return start, sent_at, acks, end_pos


async def post(session, url: str, body: str, path: str = "/v1/messages"):
    while True:
        async with session.post(url + path, data=body.encode(),
                                headers={"Content-Type": "application/x-ndjson"}) as resp:
            if resp.status == 429:
                await asyncio.sleep(0.05)
                continue
            return resp.status, await resp.read()


async def register(session, url: str, subs: list[dict]) -> float:
    t0 = time.perf_counter()
    status, _ = await post(session, url, "\n".join(json.dumps(r) for r in subs[:1]) + "\n", "/v1/subscriptions")
    if 200 <= status < 300:  # a bulk route: the rest in chunks of 10k
        for i in range(1, len(subs), 10_000):
            status, body = await post(session, url, "\n".join(json.dumps(r) for r in subs[i:i + 10_000]) + "\n",
                                      "/v1/subscriptions")
            if not 200 <= status < 300:
                raise SystemExit(f"bulk subscribe refused: HTTP {status} {body[:300]!r}")
        return time.perf_counter() - t0
    sem = asyncio.Semaphore(32)

    async def put(rec: dict) -> None:
        async with sem:
            async with session.put(f"{url}/v1/subscriptions/{rec['id']}", json=rec) as resp:
                if resp.status >= 300:
                    raise SystemExit(f"PUT refused: HTTP {resp.status} {(await resp.read())[:300]!r}")

    await asyncio.gather(*(put(rec) for rec in subs))
    return time.perf_counter() - t0


async def spark_caught_up(session, url: str, position: int, limit: float = 900.0) -> float:
    """``--engine spark``: wait until the folded Spark batches cover ``position`` messages; the seconds waited."""
    t0 = time.perf_counter()
    while await metric(session, url, "skype_spark_position") < position:
        if time.perf_counter() - t0 > limit:
            raise SystemExit(f"the Spark job did not reach position {position} within {limit} s")
        await asyncio.sleep(0.2)
    return time.perf_counter() - t0


async def run(args: argparse.Namespace, url: str, subs: list[dict], msgs: list[dict]) -> dict:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        for i in range(0, args.window, 1000):                                 # fill the window
            await post(session, url, "\n".join(json.dumps(r) for r in msgs[i:min(i + 1000, args.window)]) + "\n")
        register_s = await register(session, url, subs)
        spark_start_s = await spark_caught_up(session, url, args.window) if args.engine == "spark" else 0.0

        streams = []
        for i in range(args.streams):
            followed = [int(subs[(i * args.per_stream + j) % len(subs)]["id"]) for j in range(args.per_stream)]
            streams.append(Stream(f"s{i}", args.protocol, sorted(set(followed))))
        ctx = multiprocessing.get_context("spawn")
        stop_flag, out = ctx.Event(), ctx.Queue()
        received = [ctx.Value("q", 0, lock=False) for _ in range(args.readers)]
        connected = [ctx.Value("q", 0, lock=False) for _ in range(args.readers)]
        t_connect = time.perf_counter()
        readers = [ctx.Process(target=reader_main, daemon=True,
                               args=(url, args.protocol, [(st.name, st.subs) for st in streams[r::args.readers]],
                                     received[r], connected[r], stop_flag, out)) for r in range(args.readers)]
        for proc in readers:
            proc.start()

        def count() -> int:
            return sum(v.value for v in received)

        deadline = time.perf_counter() + 300
        while sum(v.value for v in connected) < len(streams) or \
                await metric(session, url, "skype_connected_clients") < len(streams):
            if time.perf_counter() > deadline or not all(proc.is_alive() for proc in readers):
                stop_flag.set()
                raise SystemExit("the streams did not all connect")
            await asyncio.sleep(0.2)
        connect_s = time.perf_counter() - t_connect
        await wait_idle(count, idle=1.0, limit=120.0)     # the backlogs (creation events) are in
        hist0 = await histogram(session, url)
        counts0 = [await metric(session, url, name) for name in COUNTS]

        # the publisher: one batch in flight, at a fixed rate, in a process of its own (the
        # readers' loop would delay it); perf_counter is CLOCK_MONOTONIC, shared by processes
        stream_msgs = msgs[args.window:]
        bodies = ["\n".join(json.dumps(r) for r in stream_msgs[i:i + args.batch]) + "\n"
                  for i in range(0, min(len(stream_msgs), int(args.rate * args.duration * 1.05) + args.batch
                                        if args.rate > 0 else len(stream_msgs)), args.batch)]
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            start, sent_at, acks, end_pos = await loop.run_in_executor(
                pool, publisher, url, bodies, args.batch / args.rate if args.rate > 0 else 0.0, args.duration)
        publish_s = (sent_at[-1] + acks[-1] - start) if sent_at else 0.0
        if args.engine == "spark" and end_pos:
            await spark_caught_up(session, url, end_pos[-1], limit=300.0)
        await wait_idle(count, idle=2.0, limit=120.0)
        hist1 = await histogram(session, url)
        counts1 = [await metric(session, url, name) for name in COUNTS]
        pushed, writes, blocks = (b - a for a, b in zip(counts0, counts1))
        resets_by_reason = {}
        async with session.get(url + "/metrics") as resp:
            for line in (await resp.text()).splitlines():
                m = re.match(r'skype_stream_resets_total\{reason="(\w+)"\} (\S+)', line)
                if m:
                    resets_by_reason[m.group(1)] = float(m.group(2))
        slow = await metric(session, url, "skype_slow_consumers_total")
        stop_flag.set()
        samples = []
        by_name = {st.name: st for st in streams}
        for _ in readers:  # (before join: a reader exits once its results are taken)
            got, lag, cpu = out.get(timeout=600)
            samples.append((lag, cpu))
            for name, raw, times, reconnects in got:
                st = by_name[name]
                st.raw, st.received_at, st.reconnects = raw, times, reconnects
        for proc in readers:
            proc.join()
        for st in streams:
            st.decode()
        lag50, lag99, cpu_share = loop_figures(samples, start, start + publish_s)

        final: dict[int, list] = {}
        async with session.get(url + "/v1/results") as resp:
            for line in (await resp.read()).splitlines():
                if line.strip():
                    obj = json.loads(line)
                    final[int(obj["id"])] = obj.get("topk", [])
        dupes = bad_folds = resets = 0
        for s in streams:
            seqs = [ev["seq"] for ev in s.events if "reset" not in ev]
            resets += len(s.events) - len(seqs)
            dupes += len(seqs) - len(set(seqs))
            state: dict[int, list] = {}
            for ev in s.events:
                apply_event(state, ev)
            bad_folds += any(state.get(sid) != final.get(sid) for sid in s.subs)

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
        "subscriptions": len(subs), "window": args.window, "protocol": args.protocol, "connections": args.streams,
        "per_stream": args.per_stream, "rate_target": args.rate, "batch": args.batch, "duration_s": publish_s,
        "register_s": register_s, "connect_s": connect_s, "engine": args.engine, "spark_start_s": spark_start_s,
        "offered_msgs_per_s": args.rate,
        "accepted_ratio": (accepted / publish_s) / args.rate if publish_s and args.rate > 0 else float("nan"),
        "messages": accepted, "throughput_msgs_per_s": accepted / publish_s if publish_s else 0.0,
        "ack_p50_ms": 1e3 * ack50, "ack_p99_ms": 1e3 * ack99,
        "client_push_p50_ms": 1e3 * push50, "client_push_p99_ms": 1e3 * push99,
        "server_write_p50_ms": 1e3 * bucket_quantile(hist0, hist1, 0.50),
        "server_write_p99_ms": 1e3 * bucket_quantile(hist0, hist1, 0.99),
        "events_received": sum(len(s.events) for s in streams), "events_measured": len(push),
        "server_events_written": int(pushed), "server_writes": int(writes), "server_blocks": int(blocks),
        "events_per_write": pushed / writes if writes else float("nan"),
        "folds_differing": bad_folds, "events_duplicated": dupes, "resets_received": resets,
        "resets_by_reason": json.dumps(resets_by_reason), "slow_consumers_cut": int(slow),
        "reconnects": sum(s.reconnects for s in streams),
        "readers": args.readers, "client_loop_lag_p50_ms": lag50, "client_loop_lag_p99_ms": lag99,
        "client_busiest_reader_cpu_share": cpu_share,
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
           "--max-connections", str(max(2048, 2 * args.streams + 64)),
           "--max-streams-per-connection", str(max(1000, args.per_stream)),
           "--retain-events", str(max(100_000, 2 * args.subs)), "--engine", args.engine, *args.server_arg]
    if args.engine == "spark":
        cmd += ["--trigger-ms", str(args.trigger_ms), "--partitions", str(args.partitions)] + \
            (["--master", args.master] if args.master else []) + (["--method", args.method] if args.method else [])
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
    p.add_argument("--mode", choices=sorted(MODES), help="preset one of the issue's targets")
    p.add_argument("--subs", type=int, help=f"subscriptions (default: {DEFAULTS['subs']})")
    p.add_argument("--window", type=int, help=f"count window, filled first (default: {DEFAULTS['window']})")
    p.add_argument("--streams", type=int, help=f"connections (default: {DEFAULTS['streams']})")
    p.add_argument("--per-stream", type=int, help=f"subscriptions per connection (default: {DEFAULTS['per_stream']})")
    p.add_argument("--protocol", choices=("sse", "ws"), help="SSE or WebSocket connections (default: sse)")
    p.add_argument("--rate", type=float, help="messages per second, 0: unthrottled (default: 2000)")
    p.add_argument("--batch", type=int, help="messages per NDJSON batch (default: 200)")
    p.add_argument("--duration", type=float, help="publishing seconds (default: 20)")
    p.add_argument("--fsync", choices=("always", "batch", "never"), default="batch",
                   help="the started server's policy (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--readers", type=int, default=1,
                   help="reader processes the streams are shared among (default: %(default)s)")
    p.add_argument("--engine", choices=("core", "reference", "spark"), help="the started server's engine (default: core)")
    p.add_argument("--trigger-ms", type=int, default=500, help="--engine spark: ms between micro-batches (default: 500)")
    p.add_argument("--partitions", type=int, default=2, help="--engine spark: partitions (default: 2)")
    p.add_argument("--master", help="--engine spark: Spark master (default: the server's, local[2])")
    p.add_argument("--method", help="--engine spark: distribution method (default: the server's, location)")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for the started server (repeat; e.g. --server-arg=--snapshot-every=10000000)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--keep-data", action="store_true", help="keep the started server's data directory (printed)")
    args = p.parse_args(argv)
    for key, value in {**DEFAULTS, **MODES.get(args.mode or "", {})}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
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
        if args.keep_data:
            print(f"data directory kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    width = max(map(len, report))
    for key, value in report.items():
        shown = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else value
        print(f"{key:<{width}}  {shown}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["folds_differing"] else 0


if __name__ == "__main__":
    sys.exit(main())
