"""Why the engine runs slower in ``serve`` than in ``simulate`` (issue 34): one workload through
both paths, each in its own process, with the engine's work counters beside the clocks.

* ``simulate``: :func:`skype.simulate.run` over the generated files (as ``bench/service_throughput.py``
  runs it);
* ``state``: a :class:`~skype.service.state.State` built as ``serve`` builds it
  (:func:`skype.service.build.engine_factory`), the subscriptions in one bulk command, then the
  stream as NDJSON batches of ``--batch`` through ``State.apply``, no HTTP; ``state-thread`` applies
  them on a second thread while the main thread runs an idle asyncio loop, as in the server;
  ``state-vocabulary`` starts from ``simulate``'s vocabulary (every term of both files, sorted:
  what ``serve --vocabulary FILE`` gives) instead of numbering terms as they come;
  ``state-noquery`` builds the engine without the query window (``snapshots=False``, as
  ``simulate`` does for topk-only inputs), to size what that window costs in the server.

For each run: the seconds inside ``publish_batch`` (the core), inside ``State._events`` and in
the rest of ``apply``; the engine each path built (index, buffer and options: the last line says
whether every path built the same, so that a default changed on one path shows); and the engine's counters (arrivals, expirations, re-evaluations, its own
AMP/EMP clocks, the per-phase counts), which say whether both paths made the engine do the same
work.  The paths alternate (``--rounds``), so that a busy machine slows both alike.

    PYTHONPATH=. python bench/service_core_gap.py --subs 100000 --messages 200000 --window 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
COUNTERS = ("arrivals", "expirations", "reevaluations", "amp_us", "emp_us", "avg_buffer_size", "subscriptions",
            "window_size")


def counters(engine) -> dict:
    stats = engine.stats()
    out = {k: stats[k] for k in COUNTERS if k in stats}
    out["engine"] = stats.get("engine")  # "core (index, buffer)": both paths must name the same
    out["options"] = {k: v for k, v in sorted(getattr(engine, "params", {}).items()) if not isinstance(v, dict)}
    phases = stats.get("phases") or {}
    out["phase_counts"] = {k: v for k, v in phases.items() if k != "seconds"}
    return out


def run_simulate(m: Path, s: Path, window: int, batch: int, options: dict) -> dict:
    from skype import simulate

    t0 = time.perf_counter()
    result = simulate.run({"messages": str(m), "subscriptions": str(s), "window": window, "batch_size": batch,
                           "progress": False, **options})
    return {"path": "simulate", "wall_s": round(time.perf_counter() - t0, 2),
            "stream_s": round(result.metrics["stream_s"], 2),
            "msgs_per_s": round(result.metrics["throughput_msgs_per_s"]), **counters(result.engine)}


def run_state(m: Path, s: Path, window: int, batch: int, on_thread: bool, same_vocabulary: bool,
              query_window: bool = True, options: dict | None = None) -> dict:
    from skype.service.build import engine_factory
    from skype.service.settings import ServiceSettings
    from skype.service.state import State

    clocks = {"publish_batch_s": 0.0, "events_s": 0.0}

    def timed(name, fn):
        def run(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                clocks[name] += time.perf_counter() - t
        return run

    make = engine_factory(ServiceSettings(data_dir=tempfile.gettempdir(), window=window,
                                          engine_options=dict(options or {})))
    if not query_window:  # the engine serve builds, without the query window (snapshots=False)
        from skype.engine import Engine
        from skype.model import DEFAULT_BOUNDS

        def make(vocabulary):
            return Engine(bounds=DEFAULT_BOUNDS, vocabulary=vocabulary, snapshots=False, window=window,
                          **(options or {}))

    def make_engine(vocabulary):
        engine = make(vocabulary)
        engine.publish_batch = timed("publish_batch_s", engine.publish_batch)
        return engine

    vocabulary = None
    if same_vocabulary:  # simulate's: every term of both files, sorted (as serve --vocabulary FILE would)
        from skype import simulate

        vocabulary = simulate.load_inputs({"messages": str(m), "subscriptions": str(s), "window": window},
                                          stream=True).vocabulary
    state = State(make_engine, vocabulary)
    state._events = timed("events_s", state._events)  # type: ignore[method-assign]
    state.apply({"op": "subs", "ndjson": s.read_text()})
    lines = m.read_bytes().splitlines(keepends=True)
    bodies = [b"".join(lines[i:i + batch]).decode() for i in range(0, len(lines), batch)]
    out: dict = {}

    def stream() -> None:
        t0 = time.perf_counter()
        for body in bodies:
            state.apply({"op": "msgs", "ndjson": body})
        out["stream_s"] = time.perf_counter() - t0

    if on_thread:  # as in serve: the engine on its own thread, an event loop on the main one
        loop = asyncio.new_event_loop()
        worker = threading.Thread(target=lambda: (stream(), loop.call_soon_threadsafe(loop.stop)))
        worker.start()
        loop.run_forever()
        worker.join()
    else:
        stream()
    n = len(lines)
    name = "state" + ("-thread" if on_thread else "") + ("-vocabulary" if same_vocabulary else "") + \
        ("" if query_window else "-noquery")
    return {"path": name, "stream_s": round(out["stream_s"], 2),
            "msgs_per_s": round(n / out["stream_s"]),
            "publish_batch_s": round(clocks["publish_batch_s"], 2), "events_s": round(clocks["events_s"], 2),
            "other_s": round(out["stream_s"] - clocks["publish_batch_s"] - clocks["events_s"], 2),
            **counters(state.engine)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=100_000)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--window", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--paths", default="simulate,state,state-vocabulary,state-thread",
                    help="simulate, or state with any of the suffixes -thread, -vocabulary, -noquery in that order")
    ap.add_argument("--index", help="the engine's index on both paths (default: each path's default; the "
                    "report names the engine each path built, which must be the same)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child: run one path on --files
    ap.add_argument("--files", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        m, s = (Path(p) for p in a.files.split(","))
        options = {"index": a.index} if a.index else {}
        res = run_simulate(m, s, a.window, a.batch, options) if a.one == "simulate" else \
            run_state(m, s, a.window, a.batch, "-thread" in a.one, "-vocabulary" in a.one, "-noquery" not in a.one,
                      options=options)
        print(json.dumps(res))
        return
    with tempfile.TemporaryDirectory(prefix="skype-core-gap-") as tmp:
        m, s = Path(tmp) / "m.jsonl", Path(tmp) / "s.jsonl"
        subprocess.run([sys.executable, "-m", "skype.run", "generate", "--dataset", "tweets", "--num-subs",
                        str(a.subs), "--num-messages", str(a.messages), "--messages-out", str(m),
                        "--subscriptions-out", str(s)], env=ENV, check=True, capture_output=True)
        runs = []
        for _ in range(a.rounds):
            for path in a.paths.split(","):
                out = subprocess.run([sys.executable, __file__, "--one", path, "--files", f"{m},{s}",
                                      "--window", str(a.window), "--batch", str(a.batch),
                                      *(["--index", a.index] if a.index else [])],
                                     env=ENV, check=True, capture_output=True, text=True)
                runs.append(json.loads(out.stdout))
                print(json.dumps(runs[-1]), flush=True)
        engines = {json.dumps([r["engine"], r["options"]]) for r in runs}
        print(json.dumps({"same_engine_options": len(engines) == 1, "engines": sorted(engines)}), flush=True)


if __name__ == "__main__":
    main()
