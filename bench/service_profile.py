"""Where the engine thread's time goes per message batch: design 1 against design 2 (issue 24).

In one process, without HTTP: a :class:`skype.service.state.State` over the core engine, the
subscriptions of a generated tweets workload, then the stream applied as NDJSON batches the way
the worker applies them (the log append included, no fsync).  Design 1 (``records``) parses each
line with ``json.loads`` as the route did and validates record by record; design 2
(``columnar``) hands the body to :mod:`skype.service.ingest`.  Under ``cProfile`` it reports, per
message: the Python function calls (deterministic: the same input gives the same count), and
the share of the profiled time spent parsing and validating, in the engine's batch call, building
events and appending to the log.  The time shares are indicative (the machine is shared); the
call counts are not.

    PYTHONPATH=. python bench/service_profile.py --subs 10000 --messages 20000 --window 10000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skype.engine import Engine
from skype.service import ingest
from skype.service.state import State
from skype.service.wal import Log
from skype.text import Vocabulary

ROOT = Path(__file__).resolve().parents[1]
PARTS = {  # profiled functions whose cumulative time is reported, by part
    "parse+validate": ("parse_records", "_check_records", "columnar_batch", "record_lines", "messages_batch"),
    "engine": ("publish_batch",),
    "events": ("_events",),
    "log append": ("append",),
}


def run(design: str, subs: list[bytes], batches: list[bytes], window: int, tmp: Path) -> dict:
    state = State(lambda v: Engine(window=window, vocabulary=v), Vocabulary(), ingest=design)
    log = Log(tmp / f"log-{design}", "never")
    list(log.recover(0))
    for line in subs:
        rec = json.loads(line)
        state.apply({"op": "sub", "rec": rec, "token": ""}, before=log.append)
    prof = cProfile.Profile()
    events = 0
    t0 = time.perf_counter()
    prof.enable()
    for raw in batches:
        if design == "records":  # the route parsed the lines, the worker validated them
            recs, lines = ingest.parse_records(raw)
            _, evs = state.apply({"op": "msgs", "recs": recs}, lines, before=log.append)
        else:
            _, evs = state.apply({"op": "msgs", "ndjson": raw.decode()}, before=log.append)
        events += sum(len(b) for b in evs)
    prof.disable()
    wall = time.perf_counter() - t0
    log.close()
    stats = pstats.Stats(prof)
    messages = state.position
    calls = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]  (tottime)
    cum = {}
    for (_, _, name), v in stats.stats.items():  # type: ignore[attr-defined]
        for part, names in PARTS.items():
            if name in names:
                cum[part] = cum.get(part, 0.0) + v[3]
    c = state.counters
    return {"design": design, "messages": messages, "events": events,
            "python_calls_per_message": round(calls / messages, 1),
            "profiled_us_per_message": round(1e6 * total / messages, 1),
            "wall_s_profiled": round(wall, 2),
            "share": {part: round(v / total, 3) for part, v in cum.items()},
            "counters": {"records_columnar": c.records, "records_record_by_record": c.fallback_records,
                         "term_lookups": c.term_lookups, "term_misses": c.term_misses}}


def tweets_lines(subs: int, messages: int, tmp: Path) -> tuple[list[bytes], list[bytes]]:
    """The lines of a generated tweets workload: (subscription records, message records)."""
    m, s = tmp / "m.jsonl", tmp / "s.jsonl"
    subprocess.run([sys.executable, "-m", "skype.run", "generate", "--dataset", "tweets", "--num-subs", str(subs),
                    "--num-messages", str(messages), "--messages-out", str(m), "--subscriptions-out", str(s)],
                   check=True, capture_output=True)
    return open(s, "rb").readlines(), open(m, "rb").readlines()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=10_000)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--design", choices=("records", "columnar", "both"), default="both")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skype-profile-"))
    subs, lines = tweets_lines(a.subs, a.messages, tmp)
    batches = [b"".join(lines[i:i + a.batch]) for i in range(0, len(lines), a.batch)]
    designs = ("records", "columnar") if a.design == "both" else (a.design,)
    out = [run(d, subs, batches, a.window, tmp) for d in designs]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
