"""The cone scan's cost per item (issue 35): nodes, postings and the cache lines they touch, and the
CPU of the scan and verification, on one live engine.

One engine (``index="cone"``) is prepared the paper's way on a seeded workload (fill the window,
register in bulk, turn the window over).  Before each chunk of measured messages is published, the
chunk is disseminated (scan and verification, nothing admitted: ``disseminate_only``), timed in
process CPU time; then the chunk is published, which moves the state on (thresholds, tails,
rebuilds) as in a real run.

Reported per measured message: CPU microseconds of disseminate_only, the scan's clock (wall,
inside the core), nodes tested (children tested from their parent's wide node), postings read,
candidates, and the cache lines the records read touch (``node_lines``: wide nodes; ``key_lines``:
the key lines of leaves and tails; ``meta_lines``: posting records of postings in the cone and
version reads; ``pair_lines``: pair lists).

The layouts' A/B of docs/results/2026-11-29-cone-scan-cost.md ran this bench at commit afa3672,
where the index kept every layout up at once and ``--layouts base,S,AB,ABS`` paired them in one
process (``git checkout afa3672`` and build to repeat it).

    python bench/cone_scan_cost.py --num-subs 200000 --measured 40000
    python bench/cone_scan_cost.py --num-subs 1000000 --turnover 100000 --measured 10000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

LINES = ("node_lines", "key_lines", "meta_lines", "pair_lines")
ITEMS = ("nodes_tested", "tree_postings", "tail_postings", "flat_entries", "pair_entries", "candidates")


def arrays(batch) -> tuple:
    """A message batch as disseminate_only's arrays (indptr from 0)."""
    t = batch.terms
    return (np.ascontiguousarray(t.indptr, np.int64), np.ascontiguousarray(t.ids, np.uint32),
            np.ascontiguousarray(t.weights, np.float64), np.ascontiguousarray(batch.x, np.float64),
            np.ascontiguousarray(batch.y, np.float64))


def main(argv=None) -> int:
    from skype.experiments.harness import RunSpec, prepare

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="tweets", choices=["tweets", "geonames"])
    p.add_argument("--num-subs", type=int, default=200_000)
    p.add_argument("--window", type=int, default=None, help="count window (default: --num-subs)")
    p.add_argument("--measured", type=int, default=20_000)
    p.add_argument("--turnover", type=int, default=None, help="messages after registration (default: --window)")
    p.add_argument("--chunk", type=int, default=1_000, help="messages per timed chunk")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    window = args.window or args.num_subs
    turnover = window if args.turnover is None else args.turnover
    t0 = time.perf_counter()
    spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=window, measured=turnover + args.measured,
                   index="cone", buffer="cskyband", seed=args.seed, params=(("timers", False),))
    prep = prepare(spec)
    eng, msgs = prep.engine, prep.workload.messages
    index = eng.subscription_index
    first = prep.turn_over(turnover)
    prep_s = time.perf_counter() - t0
    cpu = scan = 0.0
    items = dict.fromkeys(ITEMS + LINES, 0)
    index.set_timers(True)
    print(f"measuring (pid {os.getpid()})", file=sys.stderr, flush=True)
    for a in range(first, first + args.measured, args.chunk):
        part = msgs.slice(a, min(a + args.chunk, first + args.measured))
        arr = arrays(part)
        before, clock = index.counters(), index.phase_seconds()["scan"]
        t = time.process_time()
        index.disseminate_only(*arr)
        cpu += time.process_time() - t
        scan += index.phase_seconds()["scan"] - clock
        after = index.counters()
        for k in items:
            items[k] += after[k] - before[k]
        eng.publish_batch(part)
    n = args.measured
    out = {"args": vars(args), "prepare_s": prep_s, "index_bytes": index.memory_bytes(),
           "structure": index.structure(), "cpu_us_per_msg": cpu / n * 1e6, "scan_clock_us_per_msg": scan / n * 1e6}
    out.update({k: items[k] / n for k in items})
    out["lines_per_msg"] = sum(items[k] for k in LINES) / n
    print(json.dumps(out, indent=1, default=str))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
