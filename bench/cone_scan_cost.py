"""The cone scan's cost per item (issue 35): the scan layouts of the cone index paired on one live
engine, in one process.

One engine (``index="cone"``) is prepared the paper's way on a seeded workload (fill the window,
register in bulk, turn the window over).  The index keeps every layout up at once, so before each
chunk of measured messages is published, the chunk is disseminated (scan and verification, nothing
admitted: ``disseminate_only``) with each layout in turn, in alternating order, each timed in
process CPU time; the candidates must be equal (asserted).  Then the chunk is published with the
engine's own layout, which moves the state on (thresholds, tails, rebuilds) as in a real run.

Layouts (``set_layout``): ``0`` 36-byte nodes and 32-byte postings (before this bench), ``1`` (A,
the layout) 32-byte aligned nodes and the postings' cone fields four to a line, the record read only
when the cone test passes, the liveness check moved to the verification (prefetched), ``2`` (B,
less reading) both children's bounds in the parent's line (a child is rejected without reading
its line) over the 32-byte postings, ``3`` B's nodes over A's postings.

Reported per measured message and layout: CPU microseconds of disseminate_only, the scan's clock
(wall, inside the core), nodes tested, postings read, and the cache lines the records read touch
(``node_lines``: node records; ``key_lines``: the postings' (or key lines') spans; ``meta_lines``:
posting records read after a passing test and version reads; ``pair_lines``: pair lists).

    python bench/cone_scan_cost.py --num-subs 200000 --measured 20000
    python bench/cone_scan_cost.py --num-subs 1000000 --turnover 100000 --measured 10000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

LAYOUTS = {"base": 0, "A": 1, "B": 2, "AB": 3, "S": 4, "ABS": 7}
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
    p.add_argument("--layouts", default="base,A,B,AB", help="comma-separated: " + ", ".join(LAYOUTS))
    p.add_argument("--engine-layout", default="base", help="the layout the engine publishes with")
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    layouts = args.layouts.split(",")
    assert all(v in LAYOUTS for v in layouts), f"layouts: {', '.join(LAYOUTS)}"
    window = args.window or args.num_subs
    turnover = window if args.turnover is None else args.turnover
    t0 = time.perf_counter()
    spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=window, measured=turnover + args.measured,
                   index="cone", buffer="cskyband", seed=args.seed, params=(("timers", False),))
    prep = prepare(spec)
    eng, msgs = prep.engine, prep.workload.messages
    index = eng.subscription_index
    index.set_layout(LAYOUTS[args.engine_layout])
    for a in range(prep.start, prep.start + turnover, 20_000):
        eng.publish_batch(msgs.slice(a, min(a + 20_000, prep.start + turnover)))
    prep_s = time.perf_counter() - t0
    first = prep.start + turnover
    cpu = {v: 0.0 for v in layouts}
    scan = {v: 0.0 for v in layouts}
    items = {v: dict.fromkeys(ITEMS + LINES, 0) for v in layouts}
    index.set_timers(True)
    print(f"measuring (pid {os.getpid()})", file=sys.stderr, flush=True)
    for c, a in enumerate(range(first, first + args.measured, args.chunk)):
        part = msgs.slice(a, min(a + args.chunk, first + args.measured))
        arr = arrays(part)
        found = {}
        for v in layouts[c % len(layouts):] + layouts[:c % len(layouts)]:   # each layout leads in turn
            index.set_layout(LAYOUTS[v])
            before, clock = index.counters(), index.phase_seconds()["scan"]
            t = time.process_time()
            _, found[v] = index.disseminate_only(*arr)
            cpu[v] += time.process_time() - t
            scan[v] += index.phase_seconds()["scan"] - clock
            after = index.counters()
            for k in items[v]:
                items[v][k] += after[k] - before[k]
        for v in layouts[1:]:
            assert found[v] == found[layouts[0]], f"chunk {c}: layout {v}'s candidates differ from {layouts[0]}'s"
        index.set_layout(LAYOUTS[args.engine_layout])
        eng.publish_batch(part)
    n = args.measured
    out = {"args": vars(args), "prepare_s": prep_s, "index_bytes": index.memory_bytes(),
           "structure": index.structure()}
    for v in layouts:
        row = {"cpu_us_per_msg": cpu[v] / n * 1e6, "scan_clock_us_per_msg": scan[v] / n * 1e6}
        row.update({k: items[v][k] / n for k in items[v]})
        row["lines_per_msg"] = sum(items[v][k] for k in LINES) / n
        out[v] = row
    for v in layouts[1:]:
        out[f"cpu_ratio_{layouts[0]}_over_{v}"] = cpu[layouts[0]] / cpu[v] if cpu[v] else float("nan")
    print(json.dumps(out, indent=1, default=str))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
