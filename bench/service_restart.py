"""Where a restart of ``skype.run serve`` spends its time (issue 34: ready after SIGKILL).

Builds a data directory through the library, as the server would have written it: a snapshot
holding ``--subs`` subscriptions and a full window of ``--window`` messages (a generated tweets
workload), then ``--replay`` messages logged after it in NDJSON batches of ``--batch`` (what a
SIGKILL just before the next snapshot leaves: ``--snapshot-every`` at most).  Then, in this
process, times the phases of recovery: reading the snapshot, the restore (the window published
into an empty engine; the subscriptions validated; their bulk registration, or the import of
the engine's state the snapshot kept: ``Engine.import_state``), and the log replay;
and, unless ``--no-server``, the wall time until a real server on that directory answers
``/healthz`` ok.  Prints one JSON object.

    PYTHONPATH=. python bench/service_restart.py --subs 100000 --window 100000 --replay 20000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def make_state(window: int, registration: str = "search", queries: str = "lazy"):
    from skype.engine import Engine
    from skype.model import DEFAULT_BOUNDS
    from skype.engine_settings import engine_options
    from skype.service.state import State

    options = engine_options({"window": window, "registration": registration})  # serve's defaults otherwise
    clocks: dict[str, float] = {}

    def timed(name, fn):
        def run(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                clocks[name] = clocks.get(name, 0.0) + time.perf_counter() - t0
        return run

    def make_engine(vocabulary):  # as skype/cli/serve.py builds it, with clocks on two calls
        engine = Engine(bounds=DEFAULT_BOUNDS, vocabulary=vocabulary, snapshots=queries == "eager", **options,
                        window=window)
        engine.subscribe_batch = timed("subscribe_batch_s", engine.subscribe_batch)
        engine.publish_batch = timed("publish_batch_s", engine.publish_batch)
        engine.import_state = timed("import_state_s", engine.import_state)
        return engine

    return State(make_engine, None, ingest="columnar", max_records=100_000), clocks


def build(data: Path, subs_file: Path, lines: list[bytes], a: argparse.Namespace) -> dict:
    from skype.service import snapshot
    from skype.service.wal import Log

    state, _ = make_state(a.window, queries=a.queries)
    log = Log(data / "log", "never")
    list(log.recover())
    window, replay = lines[:a.window], lines[a.window:a.window + a.replay]
    for i in range(0, len(window), a.batch):  # no subscription yet: cheap
        state.apply({"op": "msgs", "ndjson": b"".join(window[i:i + a.batch]).decode()}, before=log.append)
    body = open(subs_file, "rb").read().decode()
    state.apply({"op": "subs", "ndjson": body, "token_hashes": [""] * sum(1 for ln in body.splitlines() if ln.strip())})  # in the snapshot, not logged
    subs = [(sid, rec.decode(), state.tokens.get(sid, "")) for sid, rec in sorted(state.records.items())]
    meta = state.meta()
    meta["vocabulary"] = {k: list(v) if isinstance(v, list) else v for k, v in meta["vocabulary"].items()}
    log.rotate()
    t0 = time.perf_counter()  # the capture, as the server takes it on the engine thread
    window_columns = (*state.window.columns(), state.window.batch())
    engine_state = state.engine_state()
    export_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    path = snapshot.write(data / "snapshots", log.next_index, meta, subs, window_columns, engine_state)
    write_s = time.perf_counter() - t0
    sizes = {f.name: f.stat().st_size for f in path.iterdir()}
    steady_capture = steady_write = 0.0
    for _ in range(a.snapshot_repeats):  # a snapshot with no subscription changed (as --snapshot-every weighs it)
        t0 = time.perf_counter()
        again = (state.meta(), (*state.window.columns(), state.window.batch()), state.engine_state())
        steady_capture += time.perf_counter() - t0
        t0 = time.perf_counter()
        snapshot.write(data / "extra-snapshots", 1, again[0], path / "subscriptions.parquet", again[1], again[2])
        steady_write += time.perf_counter() - t0
    repeats = max(a.snapshot_repeats, 1)
    for i in range(0, len(replay), a.batch):  # logged only: the restart replays them against every subscription
        log.append({"op": "msgs", "ndjson": b"".join(replay[i:i + a.batch]).decode()})
    log.close()
    shutil.rmtree(data / "extra-snapshots", ignore_errors=True)
    return {"capture_s": round(export_s, 3), "write_snapshot_s": round(write_s, 2),
            "steady_capture_s": round(steady_capture / repeats, 3), "steady_write_s": round(steady_write / repeats, 2),
            "snapshot_mb": {name: round(size / 1e6, 1) for name, size in sorted(sizes.items())}}


def phases(data: Path, window: int, registration: str, engine_state: bool, queries: str = "lazy") -> dict:
    """The phases of recovery in this process; ``engine_state`` False: the snapshot's engine
    state is dropped after the read, so the restore registers every subscription (as from a
    snapshot without it)."""
    from skype.service import snapshot
    from skype.service.wal import Log

    state, clocks = make_state(window, registration, queries)
    t0 = time.perf_counter()
    meta, subs, win, kept = snapshot.load_newest(data / "snapshots")
    t1 = time.perf_counter()
    state.restore(meta, subs, win, kept if engine_state else None)
    t2 = time.perf_counter()
    restore_publish = clocks.get("publish_batch_s", 0.0)
    replayed = 0
    for _, cmd in Log(data / "log", "never").recover(int(meta["log_index"])):
        state.apply(cmd)
        replayed += 1
    t3 = time.perf_counter()
    return {"read_snapshot_s": round(t1 - t0, 2), "restore_s": round(t2 - t1, 2),
            "restore_publish_window_s": round(restore_publish, 2),
            "restore_subscribe_batch_s": round(clocks.get("subscribe_batch_s", 0.0), 2),
            "restore_import_state_s": round(clocks.get("import_state_s", 0.0), 2),
            "replay_s": round(t3 - t2, 2), "replay_records": replayed,
            "replay_publish_s": round(clocks.get("publish_batch_s", 0.0) - restore_publish, 2),
            "recovery_s": round(t3 - t0, 2)}


def ready(data: Path, window: int, registration: str, queries: str = "lazy") -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "skype.run", "serve", "--data-dir", str(data), "--port", str(port),
                             "--window", str(window), "--registration", registration, "--queries", queries], env=ENV,
                            stderr=subprocess.DEVNULL)
    try:
        while proc.poll() is None:
            try:
                if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return time.perf_counter() - t0
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise SystemExit("server exited")
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=100_000)
    ap.add_argument("--replay", type=int, default=20_000, help="messages logged after the snapshot")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--registration", default="search", help="the engine's bulk registration (serve's option)")
    ap.add_argument("--no-server", action="store_true", help="skip the end-to-end start of a real server")
    ap.add_argument("--queries", choices=("lazy", "eager"), default="lazy",
                    help="serve's --queries: the engine keeps the query window from the start (eager) or not")
    ap.add_argument("--snapshot-repeats", type=int, default=2,
                    help="further snapshots of the same state, to time a snapshot's capture and write")
    ap.add_argument("--only", choices=("with_engine_state", "registering"),
                    help="time one restore only (default: both, one after the other)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skype-restart-bench-"))
    try:
        m, s = tmp / "m.jsonl", tmp / "s.jsonl"
        subprocess.run([sys.executable, "-m", "skype.run", "generate", "--dataset", "tweets", "--num-subs",
                        str(a.subs), "--num-messages", str(a.window + a.replay), "--messages-out", str(m),
                        "--subscriptions-out", str(s)], env=ENV, check=True, capture_output=True)
        lines = open(m, "rb").readlines()
        t0 = time.perf_counter()
        built = build(tmp / "data", s, lines, a)
        out = {"registration": a.registration, "queries": a.queries, "subscriptions": a.subs, "window": a.window, "replay_messages": a.replay, "batch": a.batch,
               "build_s": round(time.perf_counter() - t0, 2), **built}
        # A/B in one run: the restore importing the engine's state, and registering again
        for name, kept in (("with_engine_state", True), ("registering", False)):
            if a.only in (None, name):
                out[name] = phases(tmp / "data", a.window, a.registration, kept, a.queries)
        if not a.no_server:
            out["ready_s"] = round(ready(tmp / "data", a.window, a.registration, a.queries), 2)
        print(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
