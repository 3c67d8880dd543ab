"""What a message batch's events cost in the service (issue 34, publishing with no followers).

One generated tweets workload goes through a :class:`~skype.service.state.State` built as
``serve`` builds it (subscriptions in one bulk command, then the stream as NDJSON batches of
``--batch``, no HTTP, no log).  For every batch it records the work counts, which do not depend
on the machine: the change log's rows (the engine's per-message changes), the net changes of the
command, the entered entries whose rank and score the events need, and the distinct
subscriptions and messages among them.  Every ``--every`` batches, on the batch just published,
it times in one process (so that both see the same load) the two ways of finding the entered
entries' ranks and scores: the engine's ``topk_ranks`` over the entered pairs, against reading
every changed subscription's top-k whole with ``topk_arrays`` (what the events did before), and
the whole ``State._events``.  Times are medians of ``--repeat`` calls.

    PYTHONPATH=. python bench/service_events.py --subs 20000 --messages 60000 --window 20000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(1e3 * statistics.median(times), 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=20_000)
    ap.add_argument("--messages", type=int, default=60_000)
    ap.add_argument("--window", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--every", type=int, default=10, help="time every this many batches")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    from skype.service.build import engine_factory
    from skype.service.settings import ServiceSettings
    from skype.service.state import State, _by_sub_then_message

    with tempfile.TemporaryDirectory(prefix="skype-events-") as tmp:
        m, s = Path(tmp) / "m.jsonl", Path(tmp) / "s.jsonl"
        subprocess.run([sys.executable, "-m", "skype.run", "generate", "--dataset", "tweets", "--num-subs",
                        str(a.subs), "--num-messages", str(a.messages), "--messages-out", str(m),
                        "--subscriptions-out", str(s)], env=ENV, check=True, capture_output=True)
        state = State(engine_factory(ServiceSettings(data_dir=tmp, window=a.window)))
        state.apply({"op": "subs", "ndjson": s.read_text()})
        lines = m.read_bytes().splitlines(keepends=True)
    engine = state.engine
    publish = engine.publish_batch
    last: dict = {}

    def keep_log(batch):
        last["log"] = publish(batch)
        return last["log"]

    engine.publish_batch = keep_log
    totals = {"batches": 0, "log_rows": 0, "net_changes": 0, "entered": 0, "events": 0}
    for number, start in enumerate(range(0, len(lines), a.batch), start=1):
        _, blocks = state.apply({"op": "msgs", "ndjson": b"".join(lines[start:start + a.batch]).decode()})
        log = last["log"]
        order = _by_sub_then_message(log.sub, log.msg)
        sub, msg, ent = log.sub[order], log.msg[order], log.entered[order]
        starts = np.flatnonzero(np.r_[True, (sub[1:] != sub[:-1]) | (msg[1:] != msg[:-1])]) if len(log) else order
        ends = np.r_[starts[1:], len(log)] - 1
        net = ent[starts] == ent[ends] if len(log) else np.zeros(0, bool)
        entered = net & ent[ends] if len(log) else net
        pair_sub, pair_msg = sub[starts][entered], msg[starts][entered]
        changed = np.unique(sub[starts][net])
        row = {"batch": number, "log_rows": len(log), "net_changes": int(net.sum()), "entered": len(pair_sub),
               "changed_subs": len(changed), "entered_msgs": len(np.unique(pair_msg)),
               "events": sum(len(b) for b in blocks)}
        for k in totals:
            totals[k] += row.get(k, 1 if k == "batches" else 0)
        if number % a.every == 0:
            row["topk_ranks_ms"] = median_ms(lambda: engine.topk_ranks(pair_sub, pair_msg), a.repeat)
            row["topk_arrays_ms"] = median_ms(lambda: engine.topk_arrays(changed), a.repeat)
            seq = state.seq
            row["events_ms"] = median_ms(lambda: state._events(log), a.repeat)
            state.seq = seq  # the timed calls numbered events again
            print(json.dumps(row), flush=True)
    print(json.dumps({"subscriptions": a.subs, "window": a.window, "engine": engine.stats().get("engine"),
                      **totals}), flush=True)


if __name__ == "__main__":
    main()
