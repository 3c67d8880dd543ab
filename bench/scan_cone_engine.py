"""The cone trees in the engine (``index="cone"``) against the block index, paired in one process
(issue 35): both engines are prepared the paper's way on the same seeded workload (fill the
window, register in bulk, turn the window over), then publish the measured messages in chunks,
in alternating order, each chunk timed in process CPU time (``time.process_time``: the machine's
other load does not enter it as it enters wall clocks).  Every chunk's result changes must be
equal (asserted).  Reported per measured message: CPU microseconds, and from ``stats()`` the
postings and nodes (block headers for the block index) the scan read, the verifications and the
admissions; the cone's upkeep (rebuilds, re-posts) over the whole run.  ``--variants`` picks the
engines (``blocks``, ``cone``, and ``cone-nopair``: the cone without the pair bound, to A/B it);
``--timers`` adds the engines' phase clocks (scan, verify, admit, expire, flush; wall clocks read
inside the core, so they carry the machine's load, unlike the CPU times).

    python bench/scan_cone_engine.py --num-subs 100000 --measured 100000
    python bench/scan_cone_engine.py --num-subs 1000000 --measured 20000 --turnover 200000
    python bench/scan_cone_engine.py --num-subs 200000 --measured 40000 --variants cone,cone-nopair --timers
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


VARIANTS = {"blocks": "blocks", "cone": "cone", "cone-nopair": "cone"}   # variant -> index
CONE_SPLIT = ("tree_postings", "tail_postings", "flat_entries", "pair_entries", "pair_pruned", "nodes_tested")


def counts(engine) -> dict:
    c = engine.stats()["phases"]["counts"]
    return {"postings": c["scan_postings"], "nodes": c["scan_nodes"], "verify": c["verify"], "admit": c["admit"]}


def clocks(engine) -> dict:
    """The phase clocks so far (seconds; empty without timers)."""
    return dict(engine.stats()["phases"]["seconds"] or {})


def cone_split(engine) -> dict:
    d = engine.stats()["dissemination"]
    return {k: d[k] for k in CONE_SPLIT if k in d}


def main(argv=None) -> int:
    from skype.experiments.harness import RunSpec, prepare, publish_paired

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="tweets", choices=["tweets", "geonames"])
    p.add_argument("--num-subs", type=int, default=100_000)
    p.add_argument("--window", type=int, default=None, help="count window (default: --num-subs)")
    p.add_argument("--measured", type=int, default=20_000)
    p.add_argument("--turnover", type=int, default=None, help="messages after registration (default: --window)")
    p.add_argument("--buffer", default="cskyband")
    p.add_argument("--chunk", type=int, default=2_000, help="messages per timed chunk")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default="blocks,cone", help="engines, comma-separated: blocks, cone, cone-nopair")
    p.add_argument("--timers", action="store_true", help="the engines' phase clocks too (wall, inside the core)")
    p.add_argument("--cone-leaf", type=int, default=8, help="postings per leaf of the cone trees")
    p.add_argument("--cone-tail-min", type=int, default=64, help="smallest stale count that rebuilds a term's tree")
    p.add_argument("--cone-tail-fraction", type=float, default=0.25, help="stale fraction that rebuilds a term's tree")
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    assert variants and all(v in VARIANTS for v in variants), f"variants: {', '.join(VARIANTS)}"
    window = args.window or args.num_subs
    turnover = window if args.turnover is None else args.turnover
    engines, prep_s, starts = {}, {}, {}
    cone = {"leaf": args.cone_leaf, "tail_min": args.cone_tail_min, "tail_fraction": args.cone_tail_fraction}
    for name in variants:
        t0 = time.perf_counter()
        index = VARIANTS[name]
        params = (("cone", cone),) if index == "cone" else ()
        spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=window, measured=turnover + args.measured,
                       index=index, buffer=args.buffer, seed=args.seed, params=params + (("timers", args.timers),))
        prep = prepare(spec)
        if name == "cone-nopair":
            prep.engine.subscription_index.set_pair_bound(False)
        msgs = prep.workload.messages
        engines[name], starts[name] = prep.engine, prep.turn_over(turnover)
        prep_s[name] = time.perf_counter() - t0
        assert starts[name] == starts[variants[0]]
    first = starts[variants[0]]
    before = {name: counts(e) for name, e in engines.items()}
    clocks_before = {name: clocks(e) for name, e in engines.items()}
    split_before = {name: cone_split(e) for name, e in engines.items()}
    upkeep_before = {name: e.subscription_index.structure() for name, e in engines.items() if VARIANTS[name] == "cone"}
    cpu = publish_paired({name: engines[name] for name in variants}, msgs, first, args.measured, args.chunk)
    n = args.measured
    out = {"args": vars(args), "prepare_s": prep_s}
    for name, e in engines.items():
        after = counts(e)
        out[name] = {"cpu_us_per_msg": cpu[name] / n * 1e6,
                     **{f"{k}_per_msg": (after[k] - before[name][k]) / n for k in after},
                     "index_bytes": e.stats()["memory_bytes"]["subscription_index"]}
        if args.timers:
            now = clocks(e)
            out[name]["clock_us_per_msg"] = {k: (now[k] - clocks_before[name].get(k, 0.0)) / n * 1e6 for k in now}
        if VARIANTS[name] == "cone":
            upkeep = e.subscription_index.structure()
            out[name]["structure"] = upkeep
            out[name]["upkeep_per_msg"] = {k: (upkeep[k] - upkeep_before[name][k]) / n
                                           for k in ("rebuilds", "reposts", "rebuilt_postings")}
            split = cone_split(e)
            out[name]["split_per_msg"] = {k: (split[k] - split_before[name][k]) / n for k in split}
    for name in variants[1:]:
        out[f"cpu_ratio_{variants[0]}_over_{name}"] = cpu[variants[0]] / cpu[name] if cpu[name] else float("nan")
    print(json.dumps(out, indent=1, default=lambda v: v.tolist() if isinstance(v, np.ndarray) else str(v)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
