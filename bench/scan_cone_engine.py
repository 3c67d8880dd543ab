"""The cone trees in the engine (``index="cone"``) against the block index, paired in one process
(issue 35): both engines are prepared the paper's way on the same seeded workload (fill the
window, register in bulk, turn the window over), then publish the measured messages in chunks,
in alternating order, each chunk timed in process CPU time (``time.process_time``: the machine's
other load does not enter it as it enters wall clocks).  Every chunk's result changes must be
equal (asserted).  Reported per measured message: CPU microseconds, and from ``stats()`` the
postings and nodes (block headers for the block index) the scan read, the verifications and the
admissions; the cone's upkeep (rebuilds, re-posts) over the whole run.

    python bench/scan_cone_engine.py --num-subs 100000 --measured 100000
    python bench/scan_cone_engine.py --num-subs 1000000 --measured 20000 --turnover 200000
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def counts(engine) -> dict:
    c = engine.stats()["phases"]["counts"]
    return {"postings": c["scan_postings"], "nodes": c["scan_nodes"], "verify": c["verify"], "admit": c["admit"]}


def main(argv=None) -> int:
    from skype.experiments.harness import RunSpec, prepare

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="tweets", choices=["tweets", "geonames"])
    p.add_argument("--num-subs", type=int, default=100_000)
    p.add_argument("--window", type=int, default=None, help="count window (default: --num-subs)")
    p.add_argument("--measured", type=int, default=20_000)
    p.add_argument("--turnover", type=int, default=None, help="messages after registration (default: --window)")
    p.add_argument("--buffer", default="cskyband")
    p.add_argument("--chunk", type=int, default=2_000, help="messages per timed chunk")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cone-leaf", type=int, default=8, help="postings per leaf of the cone trees")
    p.add_argument("--cone-tail-min", type=int, default=64, help="smallest stale count that rebuilds a term's tree")
    p.add_argument("--cone-tail-fraction", type=float, default=0.25, help="stale fraction that rebuilds a term's tree")
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    window = args.window or args.num_subs
    turnover = window if args.turnover is None else args.turnover
    engines, prep_s, starts = {}, {}, {}
    for name in ("blocks", "cone"):
        t0 = time.perf_counter()
        spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=window, measured=turnover + args.measured,
                       index=name, buffer=args.buffer, seed=args.seed,
                       params=(("cone", {"leaf": args.cone_leaf, "tail_min": args.cone_tail_min,
                                         "tail_fraction": args.cone_tail_fraction}),) if name == "cone" else ())
        prep = prepare(spec)
        msgs = prep.workload.messages
        for a in range(prep.start, prep.start + turnover, 20_000):
            prep.engine.publish_batch(msgs.slice(a, min(a + 20_000, prep.start + turnover)))
        engines[name], starts[name], prep_s[name] = prep.engine, prep.start + turnover, time.perf_counter() - t0
        assert starts[name] == starts["blocks"]
    first = starts["blocks"]
    cpu = {name: 0.0 for name in engines}
    before = {name: counts(e) for name, e in engines.items()}
    split = ("tree_postings", "tail_postings", "flat_entries", "pair_entries", "nodes_tested")
    cone_before = {k: engines["cone"].stats()["dissemination"][k] for k in split}
    upkeep_before = engines["cone"].subscription_index.structure()
    for c, a in enumerate(range(first, first + args.measured, args.chunk)):
        part = msgs.slice(a, min(a + args.chunk, first + args.measured))
        logs = {}
        for name in (("blocks", "cone") if c % 2 == 0 else ("cone", "blocks")):
            t = time.process_time()
            logs[name] = engines[name].publish_batch(part)
            cpu[name] += time.process_time() - t
        rows = {name: sorted(zip(lg.at.tolist(), lg.sub.tolist(), lg.msg.tolist(), lg.entered.tolist()))
                for name, lg in logs.items()}
        assert rows["blocks"] == rows["cone"], f"chunk {c}: the cone engine's changes differ from the block index's"
    n = args.measured
    out = {"args": vars(args), "prepare_s": prep_s}
    for name, e in engines.items():
        after = counts(e)
        out[name] = {"cpu_us_per_msg": cpu[name] / n * 1e6,
                     **{f"{k}_per_msg": (after[k] - before[name][k]) / n for k in after},
                     "index_bytes": e.stats()["memory_bytes"]["subscription_index"]}
    out["cone"]["structure"] = engines["cone"].subscription_index.structure()
    upkeep = engines["cone"].subscription_index.structure()
    out["cone"]["upkeep_per_msg"] = {k: (upkeep[k] - upkeep_before[k]) / n for k in ("rebuilds", "reposts",
                                                                                   "rebuilt_postings")}
    out["cone"]["split_per_msg"] = {k: (engines["cone"].stats()["dissemination"][k] - cone_before[k]) / n for k in split}
    out["cpu_ratio_blocks_over_cone"] = cpu["blocks"] / cpu["cone"] if cpu["cone"] else float("nan")
    print(json.dumps(out, indent=1, default=lambda v: v.tolist() if isinstance(v, np.ndarray) else str(v)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
