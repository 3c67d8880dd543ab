"""The registration's memory: its static index of the window, its transients and the peak.

Fills a count window of N tweets (seed 0), registers N subscriptions in one bulk batch (by
search, the default), and prints one JSON line: the registration index's size
(``stats()["memory_parts"]["registration_index_peak"]``), its entries and nodes, the
registration's process CPU and wall time, the RSS before and after and the process's peak after
it, the engine's bytes, and the search's deterministic counters (equal builds give equal
counters)::

    PYTHONPATH=. python bench/registration_memory.py --num-subs 200000

To compare two builds, run one copy of this script per build side by side (the same seed gives
the same workload); the sizes and counters do not depend on timing, the CPU only roughly.
"""

from __future__ import annotations

import argparse
import json
import time

from skype import Engine
from skype.data.workloads import make_workload
from skype.report import peak_rss_bytes, release_free_memory, rss_bytes

MB = 2 ** 20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-subs", type=int, default=200_000)
    p.add_argument("--window", type=int, default=None, help="window size (default: the subscription count)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    window = args.window or args.num_subs
    w = make_workload("tweets", num_subs=args.num_subs, num_messages=window, seed=args.seed)
    eng = Engine(bounds=w.bounds, vocabulary=w.vocabulary, window=window)
    eng.publish_batch(w.messages.slice(0, window))
    release_free_memory()
    rss0, peak0 = rss_bytes(), peak_rss_bytes()
    c0, t0 = time.process_time(), time.perf_counter()
    eng.subscribe_batch(w.subscriptions)
    c1, t1 = time.process_time(), time.perf_counter()
    s = eng.stats()
    search = s["bulk_registration"]["search"]
    print(json.dumps({
        "subscriptions": args.num_subs, "window": window,
        "index_mb": round(s["memory_parts"]["registration_index_peak"] / MB, 1),
        "index_entries": search["entries"], "index_nodes": search["nodes"],
        "registration_cpu_s": round(c1 - c0, 2), "registration_wall_s": round(t1 - t0, 2),
        "rss_before_mb": rss0 // MB, "peak_before_mb": peak0 // MB,
        "rss_after_mb": rss_bytes() // MB, "peak_after_mb": peak_rss_bytes() // MB,
        "engine_mb": round(sum(s["memory_bytes"].values()) / MB, 1),
        "buffered_entries": s["buffered_entries"], "entry_scans": search["entry_scans"],
        "entry_items": search["entry_items"], "scored": search["scored"],
    }))


if __name__ == "__main__":
    main()
