"""Memory soak (a benchmark, not a test): does the engine's memory stay flat as the window turns
over and over?

100,000 subscriptions on a count window of N messages; the window is filled once, then the
stream runs for 10 more windows (10 N messages).  After every batch the resident set size is
read from /proc/self/statm; the peak of each window turnover is reported.  Flat means: every
turnover from the third on peaks within 5% of the third's peak (the first two absorb the
allocator's and the buffers' warm-up).  Exit code 1 when it is not flat.

    python bench/memory_soak.py                      # 100k subscriptions, N = 10,000, tweets
    python bench/memory_soak.py --window 20000 --index ciq --json soak.json

The workload is generated once up front (its arrays are part of the baseline, not of the growth).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--subs", type=int, default=100_000)
    p.add_argument("--window", type=int, default=10_000)
    p.add_argument("--turnovers", type=int, default=10)
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--index", default="blocks")
    p.add_argument("--buffer", default="cskyband")
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)

    from skype import Engine
    from skype.data import make_workload

    t0 = time.perf_counter()
    n = args.window * (args.turnovers + 1)
    w = make_workload(args.dataset, num_subs=args.subs, num_messages=n, seed=args.seed)
    engine = Engine(window=args.window, vocabulary=w.vocabulary, index=args.index, buffer=args.buffer)
    engine.subscribe_batch(w.subscriptions)
    print(f"workload {args.dataset}: {args.subs} subscriptions, {n} messages, window {args.window} "
          f"({time.perf_counter() - t0:.0f} s to generate and subscribe)", flush=True)
    gc.collect()
    baseline = rss_bytes()
    print(f"RSS after subscribing: {baseline / 2**20:.1f} MiB", flush=True)

    rows = []
    for turn in range(args.turnovers + 1):  # turn 0 fills the window
        start = time.perf_counter()
        peak = 0
        for lo in range(turn * args.window, (turn + 1) * args.window, args.batch):
            engine.publish_batch(w.messages.slice(lo, min(lo + args.batch, (turn + 1) * args.window)))
            peak = max(peak, rss_bytes())
        s = engine.stats()
        rows.append({"turnover": turn, "peak_rss_mib": round(peak / 2**20, 1),
                     "seconds": round(time.perf_counter() - start, 1),
                     "avg_buffer_size": round(float(s.get("avg_buffer_size", 0.0)), 2)})
        label = "fill" if turn == 0 else f"turnover {turn}"
        print(f"{label:>12}: peak RSS {peak / 2**20:8.1f} MiB  ({rows[-1]['seconds']} s, "
              f"avg buffer {rows[-1]['avg_buffer_size']})", flush=True)

    turns = [r for r in rows if r["turnover"] >= 1]
    ref = turns[2]["peak_rss_mib"] if len(turns) >= 3 else turns[-1]["peak_rss_mib"]
    later = turns[2:]
    worst = max(abs(r["peak_rss_mib"] / ref - 1.0) for r in later) if later else 0.0
    flat = worst <= args.tolerance
    print(f"turnovers 3..{args.turnovers}: largest deviation from turnover 3's peak "
          f"{100 * worst:.2f}% (limit {100 * args.tolerance:.0f}%): {'flat' if flat else 'NOT FLAT'}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "baseline_rss_mib": round(baseline / 2**20, 1), "turnovers": rows,
                       "max_deviation_after_two": worst, "flat": flat}, fh, indent=2)
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
