"""Interleaved A/B of engine configurations on one workload, the paper's protocol.

Every configuration is prepared the same way (the window filled, the subscriptions registered
in bulk); then each measured chunk of messages goes to every engine in turn, the order
alternating chunk by chunk, so a machine whose speed drifts slows every configuration alike.
Prints one row per configuration (AMP, EMP, per-message time, throughput, candidates per
affected subscription, postings visited, index bytes) and the dissemination counters.

    python bench/interleaved.py --num-subs 100000 --window 100000 --measured 10000 \\
        blocks igpt ipt ciq
    python bench/interleaved.py --num-subs 100000 blocks 'blocks:bands=16' 'blocks:block_size=32'

A configuration is ``INDEX[:name=value,...]`` with skype.Engine keyword arguments (numbers
parsed as such), or ``reference``; ``--buffer`` applies to every configuration that does not name
its own ``buffer``.  The steady-state buffer comparison (a stream of two whole windows after the
fill, each baseline over its parameter):

    python bench/interleaved.py --num-subs 100000 --measured 200000 --chunk 1000 blocks \
        blocks:buffer=kmax,kmax=30 blocks:buffer=kmax,kmax=40 \
        blocks:buffer=skyband,skyband_ratio=0.7 blocks:buffer=skyband,skyband_ratio=0.9
"""

from __future__ import annotations

import argparse
import json
import time

from skype.experiments.harness import RunSpec, prepare, snapshot, summarize

ROW = ["amp_us", "emp_us", "us_per_msg", "throughput_msgs_per_s", "candidates_per_affected",
       "affected_per_msg", "entries_visited_per_msg", "index_bytes_per_sub", "avg_buffer_size",
       "reevals_per_1000", "reeval_work_per_expiry", "subscribe_s"]
COUNTERS = ["blocks_visited", "blocks_skipped", "bands_skipped", "entries_visited", "entry_pruned",
            "revisits_skipped", "candidates", "admitted"]


def parse_config(text: str) -> tuple[str, dict]:
    index, _, rest = text.partition(":")
    params = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return index, params


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("configs", nargs="+", help="INDEX[:name=value,...] or reference")
    p.add_argument("--dataset", default="tweets", choices=["tweets", "geonames"])
    p.add_argument("--num-subs", type=int, default=20_000)
    p.add_argument("--window", type=int, default=None, help="count window (default: --num-subs)")
    p.add_argument("--measured", type=int, default=4_000)
    p.add_argument("--buffer", default="cskyband")
    p.add_argument("--chunk", type=int, default=250)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    preps = {}
    for text in args.configs:
        index, params = parse_config(text)
        engine = "reference" if index == "reference" else "core"
        buffer = params.pop("buffer", args.buffer)
        spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=args.window or args.num_subs,
                       measured=args.measured, engine=engine, index=index if engine == "core" else "blocks",
                       buffer=buffer, seed=args.seed, params=tuple(sorted(params.items())))
        preps[text] = prepare(spec)
        print(f"{text}: prepared", {k: round(v, 1) for k, v in preps[text].setup_s.items()}, flush=True)
    chunks = list(next(iter(preps.values())).chunks(args.chunk))
    before = {name: snapshot(prep.engine) for name, prep in preps.items()}
    wall = dict.fromkeys(preps, 0.0)
    names = list(preps)
    for i, chunk in enumerate(chunks):
        for name in names if i % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            preps[name].engine.publish_batch(chunk)
            wall[name] += time.perf_counter() - t
    rows = {}
    for name, prep in preps.items():
        m = summarize(prep, before[name], snapshot(prep.engine), wall[name], sum(len(c) for c in chunks))
        counters = prep.engine.stats().get("dissemination", {})
        rows[name] = {**{k: m.get(k) for k in ROW}, **{k: counters.get(k) for k in COUNTERS if k in counters}}
        print(name, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in rows[name].items()}, flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
