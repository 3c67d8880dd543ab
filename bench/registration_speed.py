"""Registration by search, variants paired in one process: process CPU and identical buffers.

Generates one workload (tweets, seed 0), then for each round registers every subscription into
a fresh engine over the same full window once per variant (the variants alternate, forwards in
even rounds and backwards in odd ones, so a load change on a shared machine hits each alike
and none always runs first), and prints per registration the process CPU of
``subscribe_batch`` (one thread: CPU, not wall, is the figure to pair), its wall time, and the
search's deterministic counters; then the CPU of each variant summed over the rounds, its
ratio to the first variant, and a digest of every buffer's state (``Engine.buffer_state``),
which must be the same for every variant (the run exits 1 otherwise).

A variant is ``name:knob=value,...`` over the search's A/B hooks (``regtree.set_runs_at_once``,
``regtree.set_search_order``, ``regtree.set_prefetch_items``, ``regsearch.set_slice_min``); a knob not named keeps its
default.  Example (the registration-speed results page)::

    PYTHONPATH=. python bench/registration_speed.py --num-subs 200000 --rounds 2 \\
        --variants base: whole:runs=16777216
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import time

from skype import Engine
from skype._core import regsearch, regtree
from skype.data.workloads import make_workload

HOOKS = {"runs": regtree.set_runs_at_once, "order": regtree.set_search_order,
         "prefetch": regtree.set_prefetch_items,
         "slice_min": regsearch.set_slice_min}


def parse(spec: str) -> tuple[str, dict[str, int]]:
    name, _, knobs = spec.partition(":")
    out = {}
    for kv in filter(None, knobs.split(",")):
        key, _, value = kv.partition("=")
        if key not in HOOKS:
            raise SystemExit(f"unknown knob {key!r}: one of {sorted(HOOKS)}")
        out[key] = int(value)
    return name, out


def register(w, window: int, knobs: dict[str, int]) -> tuple[dict, str]:
    eng = Engine(bounds=w.bounds, vocabulary=w.vocabulary, window=window)
    eng.publish_batch(w.messages.slice(0, window))
    gc.collect()
    before = {key: HOOKS[key](value) for key, value in knobs.items()}
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        eng.subscribe_batch(w.subscriptions)
        c1, t1 = time.process_time(), time.perf_counter()
    finally:
        for key, value in before.items():
            HOOKS[key](value)
    digest = hashlib.blake2b(digest_size=12)
    for i in w.subscriptions.ids:
        digest.update(repr(eng.buffer_state(int(i))).encode())
    s = eng.stats()["bulk_registration"]
    search = s["search"]
    n = max(1, search["searches"])
    out = {"cpu_s": round(c1 - c0, 3), "wall_s": round(t1 - t0, 3),
           "per_subscription": {k: round(search[k] / n, 2) for k in
                                ("scored", "blocks", "items", "descents", "fetched", "entry_items", "entry_scans")},
           "index_mb": round(search["index_bytes"] / 2 ** 20, 1)}
    return out, digest.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-subs", type=int, default=200_000)
    p.add_argument("--window", type=int, default=None, help="window size (default: the subscription count)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--variants", nargs="+", default=["base:", "whole:runs=16777216"])
    args = p.parse_args()
    window = args.window or args.num_subs
    variants = [parse(v) for v in args.variants]
    w = make_workload("tweets", num_subs=args.num_subs, num_messages=window, seed=0)
    cpu = {name: 0.0 for name, _ in variants}
    digests = {}
    for r in range(args.rounds):
        # ABBA: odd rounds run the variants backwards, so no variant always runs first
        for name, knobs in (variants if r % 2 == 0 else variants[::-1]):
            out, digest = register(w, window, knobs)
            cpu[name] += out["cpu_s"]
            digests.setdefault(name, digest)
            print(json.dumps({"variant": name, "round": r, **out, "buffers": digest}), flush=True)
    base = variants[0][0]
    same = len(set(digests.values())) == 1
    print(json.dumps({"cpu_s": {k: round(v, 3) for k, v in cpu.items()},
                      "ratio": {k: round(v / cpu[base], 3) for k, v in cpu.items()},
                      "buffers_identical": same}), flush=True)
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
