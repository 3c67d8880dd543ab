"""What the service holds beyond the engine, design 1 against design 2 (issue 24, RSS target).

In one process, without HTTP: a :class:`skype.service.state.State` over the core engine, the
subscriptions of a generated tweets workload, then the stream applied as NDJSON batches, and a
:class:`skype.service.hub.Hub` retaining the events (``--retain``, the server's
``--retain-events``).  It reports the bytes of each structure the service keeps besides the
engine, measured with ``tracemalloc`` (what Python allocated for it and still holds), for both
designs:

* design 1 (the code before design 2, rebuilt here): every event retained as its JSON text in
  the ring, plus a per-subscription index of them; the window's records as one dict per
  message; the subscription records as dicts;
* design 2: the events as columnar blocks (:mod:`skype.service.events`), the window's records as
  the batches' bodies (:mod:`skype.service.window`), the subscription records as compact JSON;

and the owner tokens, the engine's own bytes (its ``stats()["memory_bytes"]``), and the RSS of
the imports alone (``simulate``'s against the server's).  Deterministic for a seed (the allocator's byte counts
are, the wall clock is not reported).

    PYTHONPATH=. python bench/service_memory.py --subs 20000 --messages 40000 --window 20000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tracemalloc
from collections import deque
from pathlib import Path

from skype.engine import Engine
from skype.service.hub import Hub
from skype.service.state import State
from skype.text import Vocabulary

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_profile import tweets_lines  # noqa: E402


def traced(build) -> tuple[object, int]:
    """(what ``build()`` returns, the bytes it allocated and still holds)."""
    before = tracemalloc.get_traced_memory()[0]
    out = build()
    return out, tracemalloc.get_traced_memory()[0] - before


def design1_ring(blocks: list, retain: int) -> tuple:
    """Design 1's hub storage: (seq, sub) ring and per-subscription (seq, JSON text) deques."""
    ring: deque = deque()
    recent: dict[int, deque] = {}
    for block in blocks:
        for ev in block.events():
            data = json.dumps(ev, ensure_ascii=False, allow_nan=False)
            if len(ring) >= retain:
                _, old = ring.popleft()
                mine = recent[old]
                mine.popleft()
                if not mine:
                    del recent[old]
            ring.append((ev["seq"], ev["sub"]))
            recent.setdefault(ev["sub"], deque()).append((ev["seq"], data))
    return ring, recent


def design1_window(lines: list[bytes], window: int) -> deque:
    """Design 1's window records: (id, t, record dict with t) per message, the newest ``window``."""
    out: deque = deque(maxlen=window)
    for line in lines:
        rec = json.loads(line)
        out.append((rec["id"], rec["t"], dict(rec)))
    return out


def import_rss_mb(modules: str) -> float:
    """The RSS of a fresh interpreter that imported ``modules`` (comma-separated)."""
    code = ("import importlib\nfor m in %r.split(','): importlib.import_module(m)\n"
            "print([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1])" % modules)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return round(int(out) / 1024, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=20_000)
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--window", type=int, default=20_000)
    ap.add_argument("--retain", type=int, default=100_000, help="the server's --retain-events default")
    ap.add_argument("--batch", type=int, default=1000)
    a = ap.parse_args()
    sub_lines, lines = tweets_lines(a.subs, a.messages, Path(tempfile.mkdtemp(prefix="skype-memory-")))
    tracemalloc.start()
    state = State(lambda v: Engine(window=a.window, vocabulary=v), Vocabulary())

    def register():
        for line in sub_lines:
            state.apply({"op": "sub", "rec": json.loads(line), "token": "t" * 22})
    _, subs_bytes = traced(register)
    hub = Hub(a.retain)
    blocks: list = []

    def stream():
        for i in range(0, len(lines), a.batch):
            _, evs = state.apply({"op": "msgs", "ndjson": b"".join(lines[i:i + a.batch]).decode()})
            blocks.extend(evs)
            hub.publish(evs, None)
    traced(stream)
    events = sum(len(b) for b in blocks)
    kept = [b for b in blocks if b in hub.ring]  # the blocks the ring still holds
    blocks.clear()
    (ring1, _), ring1_bytes = traced(lambda: design1_ring(kept, a.retain))
    win1, win1_bytes = traced(lambda: design1_window(lines, a.window))
    records1_bytes = traced(lambda: {sid: json.loads(r) for sid, r in state.records.items()})[1]  # design 1: dicts
    records_bytes = sum(sys.getsizeof(r) for r in state.records.values()) + sys.getsizeof(state.records)
    tokens_bytes = sys.getsizeof(state.tokens) + sum(sys.getsizeof(t) for t in state.tokens.values())
    mem = state.engine.stats()["memory_bytes"]
    engine_bytes = int(sum(v for v in mem.values() if isinstance(v, (int, float))))
    mb = lambda b: round(b / 2**20, 1)  # noqa: E731
    print(json.dumps({
        "subscriptions": a.subs, "messages": len(lines), "window": a.window, "retain_events": a.retain,
        "events_emitted": events, "events_retained": hub.retained,
        "engine_memory_mb (stats)": mb(engine_bytes),
        "owner_tokens_mb": mb(tokens_bytes),
        "subscriptions_registered_traced_mb (records, tokens, engine's Python side)": mb(subs_bytes),
        "design1": {"event_ring_mb": mb(ring1_bytes), "window_records_mb": mb(win1_bytes),
                    "subscription_records_mb": mb(records1_bytes)},
        "design2": {"event_ring_mb": mb(hub.nbytes()), "window_records_mb": mb(state.window.nbytes()),
                    "subscription_records_mb": mb(records_bytes)},
        "vocabulary_terms": len(state.vocabulary),
        "imports_rss_mb": {"simulate (skype.simulate)": import_rss_mb("skype.simulate"),
                           "serve (engine, aiohttp, prometheus_client, msgspec, pyarrow.parquet)":
                               import_rss_mb("skype.engine,aiohttp.web,prometheus_client,msgspec,pyarrow.parquet")},
    }, indent=1))
    del ring1, win1


if __name__ == "__main__":
    main()
