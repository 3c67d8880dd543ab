"""Registration into a full window: replay (bulk.pyx) against search (regsearch.pyx).

Generates a workload (``--dataset``, seed 0), fills a count window of ``--window`` messages
(default: the subscription count), registers every subscription in one batch with each mode
(the modes alternate, ``--rounds`` times each, each in a fresh engine), and prints the
registration time (wall clock: indicative on a shared machine) with the deterministic counters
of ``stats()["bulk_registration"]``.  ``--check`` also compares every buffer of the two modes
(they must be identical).  Example (the lead's re-timing command)::

    python bench/registration.py --num-subs 200000 --rounds 2 --check
"""

from __future__ import annotations

import argparse
import json
import time

from skype import Engine
from skype.data.workloads import make_workload


def register(w, window: int, mode: str, buffer: str):
    eng = Engine(bounds=w.bounds, vocabulary=w.vocabulary, window=window, buffer=buffer, registration=mode)
    eng.publish_batch(w.messages.slice(0, window))
    t0 = time.perf_counter()
    eng.subscribe_batch(w.subscriptions)
    return eng, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--num-subs", type=int, default=100_000)
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--buffer", default="cskyband")
    p.add_argument("--modes", default="replay,search")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--check", action="store_true", help="compare every buffer of the modes")
    args = p.parse_args()
    window = args.window or args.num_subs
    w = make_workload(args.dataset, num_subs=args.num_subs, num_messages=window, seed=0)
    modes = args.modes.split(",")
    states = {}
    for r in range(args.rounds):
        for mode in modes:
            eng, seconds = register(w, window, mode, args.buffer)
            s = eng.stats()
            b = s["bulk_registration"]
            out = {"mode": mode, "round": r, "subscribe_s": round(seconds, 3), "bulk_seconds": round(b["seconds"], 3),
                   "build_seconds": round(b["build_seconds"], 3), "passes": b["passes"], "pairs": b["offers"],
                   "run_factor": b["run_factor"], "fallbacks": s["bulk_fallbacks"],
                   "postings": b["dissemination"].get("entries_visited"), "search": b["search"]}
            print(json.dumps(out), flush=True)
            if args.check and r == 0:
                states[mode] = [eng._core.buffer_state(int(i)) for i in w.subscriptions.ids]
            del eng
    if args.check and len(states) == 2:
        a, b = states.values()
        differ = sum(x != y for x, y in zip(a, b))
        print(json.dumps({"buffers_compared": len(a), "buffers_differ": differ}))


if __name__ == "__main__":
    main()
