"""Registration into a full window: replay (bulk.pyx) against search (regsearch.pyx, regtree.pyx).

Generates a workload (``--dataset``, seed 0), fills a count window of ``--window`` messages
(default: the subscription count), registers every subscription in one batch with each mode
(the modes alternate, ``--rounds`` times each, each in a fresh engine), and prints the
registration time (wall clock: indicative on a shared machine) with the deterministic counters
of ``stats()["bulk_registration"]``.  ``--check`` also compares every buffer of the two modes
(they must be identical).  The modes: ``replay`` and ``search`` (the default, per-term k-d
trees, regtree.pyx).  Example (the lead's re-timing command)::

    python bench/registration.py --num-subs 200000 --rounds 2 --check

``--breakdown alpha`` (or ``frequency``) then registers the subscriptions again in five groups,
by alpha or by the window frequency of their most frequent term, and prints each group's
search counters per subscription.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from skype import Engine
from skype.data.workloads import make_workload


def register(w, window: int, mode: str, buffer: str, subs=None):
    eng = Engine(bounds=w.bounds, vocabulary=w.vocabulary, window=window, buffer=buffer, registration=mode)
    eng.publish_batch(w.messages.slice(0, window))
    t0 = time.perf_counter()
    eng.subscribe_batch(w.subscriptions if subs is None else subs)
    return eng, time.perf_counter() - t0


def per_subscription(search: dict) -> dict:
    n = max(1, search["searches"])
    keys = ("scored", "blocks", "items", "fetched", "fetched_alone", "entry_items", "entry_scans")
    return {k: round(search[k] / n, 1) for k in keys if k in search}


def breakdown(w, window: int, mode: str, buffer: str, by: str) -> None:
    """Register the subscriptions in groups (each into its own engine over the same window) and
    print each group's search counters per subscription: by alpha (fifths of [0, 1]) or by the
    window frequency of the subscription's most frequent term (quintiles)."""
    subs = w.subscriptions
    if by == "alpha":
        value = subs.alpha
        edges = np.linspace(0.0, 1.0, 6)
    else:
        df = np.bincount(w.messages.slice(0, window).terms.ids)
        ids = subs.terms.ids
        rows = np.repeat(np.arange(len(subs)), np.diff(subs.terms.indptr))
        value = np.zeros(len(subs))
        np.maximum.at(value, rows, np.where(ids < len(df), df[np.minimum(ids, len(df) - 1)], 0))
        edges = np.quantile(value, np.linspace(0.0, 1.0, 6))
    for lo, hi in zip(edges[:-1], edges[1:]):
        rows = np.flatnonzero((value >= lo) & ((value < hi) | (hi == edges[-1])))
        if len(rows) < 2_000:  # below the bulk path's smallest batch
            continue
        eng, seconds = register(w, window, mode, buffer, subs.take(rows))
        s = eng.stats()["bulk_registration"]
        print(json.dumps({"mode": mode, "by": by, "from": round(float(lo), 3), "to": round(float(hi), 3),
                          "subscriptions": len(rows), "subscribe_s": round(seconds, 3),
                          "per_subscription": per_subscription(s["search"])}), flush=True)
        del eng


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--num-subs", type=int, default=100_000)
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--buffer", default="cskyband")
    p.add_argument("--modes", default="replay,search")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--check", action="store_true", help="compare every buffer of the modes")
    p.add_argument("--breakdown", choices=("alpha", "frequency"), default=None,
                   help="then, per search mode, the counters per subscription by alpha or term frequency")
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
            if b["search"]:
                out["per_subscription"] = per_subscription(b["search"])
            print(json.dumps(out), flush=True)
            if args.check and r == 0:
                states[mode] = [eng.buffer_state(int(i)) for i in w.subscriptions.ids]
            del eng
    if args.check and len(states) > 1:
        first, *others = modes
        for mode in others:
            differ = sum(x != y for x, y in zip(states[first], states[mode]))
            print(json.dumps({"against": first, "mode": mode, "buffers_compared": len(states[mode]),
                              "buffers_differ": differ}))
    if args.breakdown:
        for mode in modes:
            if mode != "replay":
                breakdown(w, window, mode, args.buffer, args.breakdown)


if __name__ == "__main__":
    main()
