"""What the merge stage's floors save ``prefix`` replicas: counted in one process, no Spark (issue 37).

    python bench/prefix_floors.py --dataset tweets --num-subs 20000 --num-messages 50000 \
        --window 5000 --batch-size 2000 --partitions 8 --out floors-5k.json

**Protocol.**  One seeded workload (``skype.simulate.load_inputs``).  Three runs of
:func:`skype.sizing.partitions.measure_partitions`, the in-process DSkype runtime (the router, one
:class:`~skype.dskype.partition.PartitionCore` per partition with the loose-prefix activation and
keyword summaries, the merge buckets):

* ``central``: ``location`` at P = 1, one engine holding every subscription and every message in
  a count window: the centralized engine's work (its counters equal a lone engine's);
* ``prefix``: ``prefix`` at P = ``--partitions``, as DSkype runs it today;
* ``prefix+floors``: the same with the merge buckets' global k-th score floors
  (:mod:`skype.dskype.floors`) fed into each next batch's partition inputs (``--floor-margin``:
  sticky floors).

Per run, over the steady batches (after the window has filled): the sum over partitions and the
busiest partition of every work counter (postings, candidates, admissions, re-evaluation work,
skipped admissions, floor repairs), and the thread CPU seconds of each partition's ``apply``.
Printed: admissions per message, Σ admissions over the centralized engine's, the busiest
partition's admissions and CPU over the centralized engine's.  Counters are deterministic; CPU
seconds are noisy on a shared machine (leave the final timing to a quiet one).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/prefix_floors.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--num-subs", type=int, default=20_000)
    p.add_argument("--num-messages", type=int, default=50_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=int, default=5_000)
    p.add_argument("--batch-size", type=int, default=2_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--runs", default="central,prefix,prefix+floors",
                   help="which runs, comma-separated: prefix, prefix+floors, prefix+floors:L (side list of L, "
                        "overriding --floor-side-list: paired A/B in one process)")
    p.add_argument("--floor-margin", type=float, default=0.0,
                   help="sticky floors (FloorKeeper.margin) in the floor runs; default: %(default)s")
    p.add_argument("--floor-settle", action="store_true",
                   help="a floor applies only from its second batch in a row (FloorKeeper.settle)")
    p.add_argument("--floor-side-list", type=int, default=32,
                   help="skipped messages the engine keeps per subscription and re-admits when a floor falls "
                        "(FloorKeeper.side_list; 0: rebuild instead, the first design); default: %(default)s")
    p.add_argument("--central-phases", action="store_true",
                   help="also run one engine over the workload with its phase clocks on and print the share of "
                        "its arrival time that scans (the part the floors cannot remove)")
    p.add_argument("--out", help="JSON of the figures")
    return p


def summarize(costs, central) -> dict:
    """The figures of one run against the centralized run (module docstring)."""
    work = {k: np.asarray(v, np.int64) for k, v in costs.work.items()}
    msgs = max(costs.steady_messages, 1)
    c_admits = max(int(sum(central.work["admits"])), 1)
    c_cpu = max(float(sum(central.apply_cpu_s)), 1e-9)
    busiest_admits = int(work["admits"].max())
    return {
        "admits_per_message": float(work["admits"].sum()) / msgs,
        "sum_admits_over_central": float(work["admits"].sum()) / c_admits,
        "busiest_admits_over_central": busiest_admits / c_admits,
        "sum_postings_over_central": float(work["postings"].sum()) / max(int(sum(central.work["postings"])), 1),
        "busiest_postings_over_central": float(work["postings"].max()) / max(int(sum(central.work["postings"])), 1),
        "busiest_candidates_over_central": float(work["candidates"].max())
        / max(int(sum(central.work["candidates"])), 1),
        "busiest_cpu_over_central": float(max(costs.apply_cpu_s)) / c_cpu,
        "busiest_engine_cpu_over_central": float(max(costs.engine_cpu_s)) / max(float(sum(central.engine_cpu_s)), 1e-9),
        "sum_cpu_over_central": float(sum(costs.apply_cpu_s)) / c_cpu,
        "floor_skips_per_message": float(work["floor_skips"].sum()) / msgs,
        "floor_repairs": int(work["floor_repairs"].sum()),
        "floor_readmits": int(work["floor_readmits"].sum()),
        "floor_readmitted": int(work["floor_readmitted"].sum()),
        "floor_refills": int(work["floor_refills"].sum()),
        "floor_readmit_work_over_central": float(work["floor_readmit_work"].sum())
        / max(int(sum(central.work["reevaluation_work"])), 1),
        "busiest_reevaluation_work_over_central": float(work["reevaluation_work"].max())
        / max(int(sum(central.work["reevaluation_work"])), 1),
        "reevaluation_work_over_central": float(work["reevaluation_work"].sum())
        / max(int(sum(central.work["reevaluation_work"])), 1),
        "merge_cpu_s": float(sum(costs.merge_cpu_s)),
    }


def central_phases(inputs, window: int, batch_size: int) -> dict:
    """One engine (the centralized one) with its phase clocks: seconds per phase over the steady
    batches, and the share of dissemination (index traversal and verification) in their sum."""
    from skype.engine import Engine

    engine = Engine(bounds=inputs.bounds, window=int(window), timers=True)
    engine.subscribe_batch(inputs.subscriptions)
    messages = inputs.messages()
    before: dict = {}
    for lo in range(0, len(messages), batch_size):
        if lo == ((window + batch_size - 1) // batch_size) * batch_size:
            before = dict(engine.stats()["phases"]["seconds"] or {})
        engine.publish_batch(messages.slice(lo, min(lo + batch_size, len(messages))))
    after = dict(engine.stats()["phases"]["seconds"] or {})
    spent = {k: float(after[k]) - float(before.get(k, 0.0)) for k in after}
    # disseminate holds scan and verify; reevaluate is inside admit and expire (docs/engine.md)
    total = sum(spent.get(k, 0.0) for k in ("enter", "disseminate", "admit", "expire", "flush")) or 1e-9
    return {"seconds": spent, "scan_share": spent.get("disseminate", 0.0) / total}


def floor_proof_bound(work: dict, central_work: dict, phases: dict) -> float:
    """A lower bound of the busiest partition's engine time over the centralized engine's that no
    admission floor can lower: per partition, the centralized engine's scan, verify and enter
    seconds scaled by the partition's postings, candidates and arrivals over the centralized
    engine's (a floor acts after all three), over the centralized engine's total; the largest
    partition's.  Admissions, expiries and flushes count 0 (perfect floors)."""
    sec = phases["seconds"]
    total = sum(sec.get(k, 0.0) for k in ("enter", "disseminate", "admit", "expire", "flush")) or 1e-9
    parts = [("scan", "postings"), ("verify", "candidates"), ("enter", "arrivals")]
    per = sum(sec.get(phase, 0.0) * np.asarray(work[counter], np.float64) / max(float(sum(central_work[counter])), 1.0)
              for phase, counter in parts)
    return float(np.max(per)) / total


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from skype.simulate import load_inputs
    from skype.sizing.partitions import measure_partitions

    inputs = load_inputs({"dataset": args.dataset, "num_subs": args.num_subs, "num_messages": args.num_messages,
                          "window": args.window, "seed": args.seed})
    runs = args.runs.split(",")
    out: dict = {"settings": vars(args), "runs": {}}
    central = measure_partitions(inputs, "location", 1, window=args.window, batch_size=args.batch_size)
    out["runs"]["central"] = central.as_dict()
    for name in runs:
        if name == "central":
            continue
        base, _, side = name.partition(":")
        floors = base.endswith("+floors")
        costs = measure_partitions(inputs, base.split("+")[0], args.partitions, window=args.window,
                                   batch_size=args.batch_size, floors=floors, floor_margin=args.floor_margin,
                                   floor_settle=args.floor_settle,
                                   floor_side_list=int(side) if side else args.floor_side_list)
        out["runs"][name] = {**costs.as_dict(), "summary": summarize(costs, central)}
        s = out["runs"][name]["summary"]
        print(f"{name:>14}  admits/msg {s['admits_per_message']:7.1f}  Σ admits/central {s['sum_admits_over_central']:.2f}"
              f"  busiest admits/central {s['busiest_admits_over_central']:.3f}  busiest CPU/central "
              f"{s['busiest_cpu_over_central']:.3f} (engine {s['busiest_engine_cpu_over_central']:.3f})  Σ CPU/central {s['sum_cpu_over_central']:.2f}  skips/msg "
              f"{s['floor_skips_per_message']:.1f}  repairs {s['floor_repairs']}  readmits {s['floor_readmits']}  refills {s['floor_refills']}"
              f"  re-eval work/central {s['reevaluation_work_over_central']:.2f}", flush=True)
    c = central.work
    print(f"{'central':>14}  admits/msg {sum(c['admits']) / max(central.steady_messages, 1):7.1f}", flush=True)
    if args.central_phases:
        out["central_phases"] = phases = central_phases(inputs, args.window, args.batch_size)
        print(f"{'central':>14}  phase seconds {({k: round(v, 3) for k, v in phases['seconds'].items()})}  scan share "
              f"{phases['scan_share']:.2f}", flush=True)
        for name, run in out["runs"].items():
            if name != "central":
                run["summary"]["floor_proof_bound"] = bound = floor_proof_bound(run["work"], central.work, phases)
                print(f"{name:>14}  busiest partition's floor-proof work / central >= {bound:.3f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
