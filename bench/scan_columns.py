"""Paired A/B of the block index's posting scan: fat postings against the compact hot columns.

One engine (``column_test=True``, so that both paths can run over the same lists) is prepared
the paper's way (the window filled, the subscriptions registered in bulk, one window turnover);
then the measured messages are scanned (no verification, nothing admitted: the index is not
changed) in chunks, each chunk by every variant in turn, the order rotating chunk by chunk, so
that a machine whose speed drifts slows every variant alike.  Every variant must find the same
first meetings (checked).  Seeded; re-time it on a quiet machine:

    python bench/scan_columns.py --num-subs 200000 --window 200000 --measured 20000
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from skype._core import blockindex
from skype.engine import Engine
from skype.experiments.harness import RunSpec, prepare

VARIANTS = ("fat", "fat+prefetch", "columns:portable+prefetch", "columns:avx2", "columns:avx2+prefetch")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="tweets", choices=["tweets", "geonames"])
    p.add_argument("--num-subs", type=int, default=50_000)
    p.add_argument("--window", type=int, default=None, help="count window (default: --num-subs)")
    p.add_argument("--measured", type=int, default=10_000)
    p.add_argument("--chunk", type=int, default=500)
    p.add_argument("--turnover", type=int, default=None, help="messages after registration (default: --window)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help="comma-separated subset of %(default)s (one alone: for callgrind)")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    window = args.window or args.num_subs
    turnover = window if args.turnover is None else args.turnover
    spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=window,
                   measured=turnover + args.measured, index="blocks", seed=args.seed,
                   params=(("column_test", True),))
    t0 = time.perf_counter()
    prep = prepare(spec)
    msgs = prep.workload.messages
    prep.engine.publish_batch(msgs.slice(prep.start, prep.start + turnover))
    assert isinstance(prep.engine, Engine)
    index = prep.engine.subscription_index
    print(f"prepared in {time.perf_counter() - t0:.1f} s; kernels: {', '.join(blockindex.available_scan_kernels())}")
    variants = [v for v in args.variants.split(",")
                if v.startswith("fat") or v[8:].split("+")[0] in blockindex.available_scan_kernels()]
    seconds = dict.fromkeys(variants, 0.0)
    found = dict.fromkeys(variants, 0)
    before = index.counters()
    first = prep.start + turnover
    for c, a in enumerate(range(first, first + args.measured, args.chunk)):
        m = msgs.slice(a, min(a + args.chunk, first + args.measured))
        indptr = np.ascontiguousarray(m.terms.indptr, np.int64)
        terms = np.ascontiguousarray(m.terms.ids, np.uint32)
        weights = np.ascontiguousarray(m.terms.weights, np.float64)
        order = variants[c % len(variants):] + variants[:c % len(variants)]
        for v in order:
            columns = v.startswith("columns")
            if columns:
                blockindex.set_scan_kernel(v[8:].split("+")[0])
            blockindex.set_scan_prefetch(v.endswith("+prefetch"))
            s, n = index.scan_only(indptr, terms, weights, m.x, m.y, columns)
            seconds[v] += s
            found[v] += n
    blockindex.set_scan_kernel("auto")
    blockindex.set_scan_prefetch(False)
    after = index.counters()
    assert variants and len(set(found.values())) == 1, f"variants found different first meetings: {found}"
    visited = (after["entries_visited"] - before["entries_visited"]) / len(variants) / args.measured
    ncol = sum(v.startswith("columns") for v in variants)
    kept = (after["column_kept"] - before["column_kept"]) / max(ncol, 1) / args.measured
    rows = [{"variant": v, "scan_us_per_msg": seconds[v] / args.measured * 1e6,
             "postings_per_msg": visited, "column_kept_per_msg": kept if v.startswith("columns") else None,
             "first_meetings_per_msg": found[v] / args.measured} for v in variants]
    print(f"{'variant':<18} {'scan us/msg':>12} {'postings/msg':>13} {'col. kept/msg':>14} {'first meetings/msg':>19}")
    for r in rows:
        kept_s = f"{r['column_kept_per_msg']:.1f}" if r["column_kept_per_msg"] is not None else "-"
        print(f"{r['variant']:<18} {r['scan_us_per_msg']:>12.2f} {r['postings_per_msg']:>13.1f} {kept_s:>14} "
              f"{r['first_meetings_per_msg']:>19.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
