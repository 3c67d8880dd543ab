"""Restart of ``serve --engine spark`` after a SIGKILL of the service and its driver together
(issue 37: serving again within 60 s at 100k subscriptions, nothing acknowledged lost).

1. Starts ``python -m skype.run serve --engine spark`` on a free loopback port with a fresh data
   directory, registers ``--subs`` tweets subscriptions in bulk (NDJSON), publishes ``--window``
   messages in NDJSON batches of ``--batch``, and waits until the Spark job's folded batches
   cover them (``skype_spark_position``).
2. Publishes ``--tail`` more messages and, right after the last acknowledgement, SIGKILLs the
   service; its driver dies with it (a parent-death signal), so both go down together, with
   batches staged and not yet run.
3. Starts the service again on the same directory and times: ``ready_s`` (``/healthz`` answers
   ok: the log recovered, the completed batches folded again), ``events_s`` (the folded batches
   cover every acknowledged message: the driver restarted, resumed from its checkpoint and ran
   the staged batches).  Checks that nothing acknowledged was lost: the subscriptions and the
   position ``/healthz`` reports, and the position the events reach, equal what was acknowledged.

Prints one JSON object; exit code 1 when something acknowledged was lost.  ``restart`` in it is
the timeline of the restart, in seconds after the kill: the service answering (``ready``), the
new driver's phases (``driver.log``: its imports, its inputs, the Spark session), the first batch
after the restart planned (its offset file) and completed (its metrics file, with the batch's own
``pipeline_s``, the slowest partition task and the partitions' engine rebuilds), and the
events caught up (``events``).

    PYTHONPATH=. python bench/service_spark_restart.py --subs 100000 --window 10000
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
sys.path.insert(0, str(ROOT))

NDJSON = {"Content-Type": "application/x-ndjson"}


def metric(url: str, name: str) -> float:
    for line in requests.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def start(data_dir: Path, port: int, args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "skype.run", "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
           "--port", str(port), "--window", str(args.window), "--engine", "spark", "--partitions",
           str(args.partitions), "--trigger-ms", str(args.trigger_ms), "--max-records", str(max(100_000, args.subs))]
    if args.master:
        cmd += ["--master", args.master]
    t0 = time.perf_counter()
    with open(log, "ab") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {log.read_text()[-2000:]}")
        try:
            if requests.get(url + "/healthz", timeout=2).json().get("status") == "ok":
                return proc, time.perf_counter() - t0
        except (requests.RequestException, ValueError):
            pass
        time.sleep(0.1)


def wait_position(url: str, position: int, limit: float) -> float:
    t0 = time.perf_counter()
    while metric(url, "skype_spark_position") < position:
        if time.perf_counter() - t0 > limit:
            raise SystemExit(f"the Spark job did not reach position {position} within {limit} s")
        time.sleep(0.2)
    return time.perf_counter() - t0


def restart_timeline(run_dir: Path, killed_at: float) -> dict:
    """Seconds after the kill at which each step of the restart happened (module docstring)."""
    out: dict = {}
    log = run_dir / "driver.log"
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if line.startswith("skype live_driver {"):
            entry = json.loads(line[len("skype live_driver "):])
            if entry["at"] >= killed_at:
                out[f"driver_{entry['phase']}"] = round(entry["at"] - killed_at, 2)
    # the first batch completed after the kill (a batch in flight at the kill is re-run from its
    # logged offsets: its offset file is older than the kill, "planned" is then left out)
    done = sorted(p for p in (run_dir / "metrics").glob("batch-*.json") if p.stat().st_mtime >= killed_at)
    if done:
        first = int(done[0].name[6:14])
        offsets = run_dir / "spark" / "offsets" / str(first)
        if offsets.exists() and offsets.stat().st_mtime >= killed_at:
            out["batch_planned"] = round(offsets.stat().st_mtime - killed_at, 2)
        metrics = done[0]
        out["batch_done"] = round(metrics.stat().st_mtime - killed_at, 2)
        m = json.loads(metrics.read_text())
        stages = [st for st in m.get("stages", []) if st.get("stage") == "partition"]
        out["batch"] = {"id": first, "pipeline_s": round(m.get("pipeline_s", 0.0), 2),
                        "messages": max((st.get("messages", 0) for st in stages), default=0),
                        "task_s_max": round(max((st.get("task_s", 0.0) for st in stages), default=0.0), 2),
                        "rebuild_s_max": round(max((st.get("rebuild_s", 0.0) for st in stages), default=0.0), 2),
                        "events_write_s": round(m.get("events_write_s", 0.0), 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subs", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=1000, help="messages per NDJSON batch")
    ap.add_argument("--tail", type=int, default=2000, help="messages published just before the kill")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--trigger-ms", type=int, default=500)
    ap.add_argument("--master", help="Spark master (default: the server's, local[2])")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the data directory (printed)")
    args = ap.parse_args(argv)

    from skype import io
    from skype.data.workloads import make_workload

    w = make_workload("tweets", num_subs=args.subs, num_messages=args.window + args.tail, seed=args.seed)
    subs = [json.dumps(r) for r in io.subscription_objects(w.subscriptions, w.vocabulary)]
    msgs = [json.dumps(r) for r in io.message_objects(w.messages, w.vocabulary)]
    tmp = Path(tempfile.mkdtemp(prefix="skype-spark-restart-"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = tmp / "server.log"
    proc = None
    try:
        proc, first_ready_s = start(tmp / "data", port, args, log)
        for i in range(0, len(subs), 50_000):
            r = requests.post(url + "/v1/subscriptions", data="\n".join(subs[i:i + 50_000]) + "\n", headers=NDJSON)
            assert r.status_code == 201, r.text
        position = 0

        def publish(lo: int, hi: int) -> None:
            nonlocal position
            for i in range(lo, hi, args.batch):
                r = requests.post(url + "/v1/messages", data="\n".join(msgs[i:min(i + args.batch, hi)]) + "\n",
                                  headers=NDJSON)
                assert r.status_code == 200, r.text
                position = r.json()["position"]

        publish(0, args.window)
        first_events_s = wait_position(url, position, 1800.0)
        publish(args.window, args.window + args.tail)
        acked = {"subscriptions": args.subs, "position": position}
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        t0 = time.perf_counter()
        proc, _ = start(tmp / "data", port, args, log)
        ready_s = time.perf_counter() - t0
        health = requests.get(url + "/healthz", timeout=30).json()
        events_s = ready_s + wait_position(url, position, 1800.0)
        report = {
            "subscriptions": args.subs, "window": args.window, "tail": args.tail, "partitions": args.partitions,
            "trigger_ms": args.trigger_ms, "master": args.master or "local[2]",
            "first_start_ready_s": first_ready_s, "first_events_s": first_events_s,
            "ready_s": ready_s, "events_s": events_s,
            "acknowledged": acked, "recovered": {"subscriptions": health.get("subscriptions"),
                                                 "position": health.get("position")},
            "events_position": metric(url, "skype_spark_position"),
            "driver_starts": metric(url, "skype_spark_driver_starts"),
            "restart": dict(restart_timeline(tmp / "data" / "spark", killed_at), ready=round(ready_s, 2),
                            events=round(events_s, 2)),
            "lost": int(health.get("subscriptions") != args.subs or health.get("position") != position),
        }
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if args.keep:
            print(f"data directory: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 1 if report["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
