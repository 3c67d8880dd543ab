"""The registration index per group of terms, and weight-sorted leaves: memory stages and counts.

One process per variant (the peak RSS is the process's): runs ``simulate`` (the paper's
protocol: fill a count window of N tweets, register N subscriptions in one bulk batch, by
search) with the registration hooks set (``regtree.set_group_entries``: the index built per
group of about that many entries, 0 once for the batch; ``regtree.set_leaf_order``: leaves
sorted by weight with an early stop), and prints one JSON line: the RSS and peak after each
stage (``metrics["memory_stages"]``), the registration's wall time, process CPU, the largest
index, the indexes built and the search's counters per subscription (deterministic)::

    PYTHONPATH=. python bench/registration_groups.py --num-subs 200000 --group-entries 0
    PYTHONPATH=. python bench/registration_groups.py --num-subs 200000 --group-entries 1000000

``--turnover`` (default 0) publishes that many windows after registration, unmeasured; with
``--messages`` the stream goes on as the paper's protocol.
"""

from __future__ import annotations

import argparse
import json
import time

from skype._core import regtree
from skype.simulate import run

MB = 2 ** 20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-subs", type=int, default=200_000)
    p.add_argument("--window", type=int, default=None, help="window size (default: the subscription count)")
    p.add_argument("--messages", type=int, default=0, help="messages measured after the turnover")
    p.add_argument("--turnover", type=float, default=0.0)
    p.add_argument("--group-entries", type=int, default=None, help="regtree.set_group_entries (default: keep)")
    p.add_argument("--leaf-order", type=int, default=None, help="regtree.set_leaf_order (default: keep)")
    args = p.parse_args()
    window = args.window or args.num_subs
    if args.group_entries is not None:
        regtree.set_group_entries(args.group_entries)
    if args.leaf_order is not None:
        regtree.set_leaf_order(args.leaf_order)
    turnover = int(args.turnover * window)
    c0 = time.process_time()
    done = run({"dataset": "tweets", "num_subs": args.num_subs, "window": window, "fill_window": True,
                "turnover": args.turnover, "num_messages": window + turnover + args.messages, "seed": 0})
    m = done.metrics
    search = done.engine.stats()["bulk_registration"]["search"]
    n = max(1, search["searches"])
    print(json.dumps({
        "subscriptions": args.num_subs, "window": window,
        "group_entries": regtree.set_group_entries(0), "leaf_order": regtree.set_leaf_order(0),
        "stages": {s["stage"]: {"rss_mb": s["rss_bytes"] // MB, "peak_mb": s["peak_rss_bytes"] // MB}
                   for s in m["memory_stages"]},
        "peak_mb": m["peak_rss_bytes"] // MB, "subscribe_s": m.get("subscribe_s"),
        "process_cpu_s": round(time.process_time() - c0, 2),
        "index_mb": round(search["index_bytes"] / MB, 1), "index_builds": search.get("index_builds", 1),
        "index_seconds": round(search["index_seconds"], 2),
        "per_subscription": {k: round(search[k] / n, 2) for k in
                             ("scored", "blocks", "items", "fetched", "entry_items", "entry_scans", "leaf_skipped")},
    }), flush=True)


if __name__ == "__main__":
    main()
