"""The mixed workload in steady state under each ``terms`` design, runs alternating (issue 36).

Each run is ``simulate --fill-window --timers`` on the same files (the window filled, the
subscriptions registered in bulk, one window turnover unmeasured, then the rest measured), with
``CoreQueryKinds.TERMS_DESIGN`` set to the design; designs alternate ``--rounds`` times so that a
machine whose speed drifts slows each alike.  Prints per run: msg/s, AMP, EMP, flush, the
``terms`` part per message and the design's counters per measured message (design 3: block
visits, row updates, crossings, re-ranks, refills, walks; design 2: subscription visits, count
updates, walks), and the peak RSS of the process so far.

    python -m skype.run generate --dataset tweets --num-subs 20000 --num-messages 50000 \\
        --sub-kinds topk,range,knn,terms --messages-out m20.jsonl --subscriptions-out s20.jsonl
    python bench/terms_designs.py --messages m20.jsonl --subscriptions s20.jsonl --window 20000 \\
        blocks buffers --rounds 2
    # design 3's parameters (TERMS_BLOCKS: index cells, centre cells, gate and fill factors):
    python bench/terms_designs.py ... blocks:64,64,3,4 blocks:64,32,2,4
    # the issue's size: --num-subs 100000 --num-messages 230000, --window 100000 (one design a
    # process for the RSS: run ``blocks`` and ``buffers`` separately)
"""

from __future__ import annotations

import argparse
import json
import resource

from skype import simulate
from skype.querykinds import CoreQueryKinds

COUNTERS = {"blocks": ["block_visits", "row_updates", "crossings", "reranks", "light_reranks", "light_falls", "refills", "walks",
                       "walks_bounded", "block_bounded", "lane_bounded", "tracked_new"],
            "buffers": ["matches", "count_updates", "walks", "walks_bounded", "grid_checks", "reevaluations"]}


def one_run(design: str, args: argparse.Namespace) -> dict:
    design, _, params = design.partition(":")
    CoreQueryKinds.TERMS_DESIGN = design
    CoreQueryKinds.TERMS_BLOCKS = tuple(int(v) for v in params.split(",")) if params else BLOCKS_DEFAULT
    options = {"messages": args.messages, "subscriptions": args.subscriptions, "window": args.window,
               "fill_window": True, "timers": True, "progress": False}
    m = simulate.run(options).metrics
    measured = m["messages"]
    terms = m["engine_stats"]["queries"]["kinds"]["terms"]
    counts = terms["blocks"] if design == "blocks" else terms
    kinds_total = {key: counts.get(key) for key in COUNTERS[design]}   # None: a build without it
    row = {"design": design + (":" + params if params else ""), "msg_s": round(m["throughput_msgs_per_s"], 1), "amp_us": round(m["amp_us"], 1),
           "emp_us": round(m["emp_us"], 1), "flush_us": round(m["flush_us"], 1),
           "terms_us": round(m["parts_us"].get("terms", 0.0), 1),
           "parts_us": {k: round(v, 1) for k, v in m["parts_us"].items()},
           "measured": measured, "counters_total": kinds_total,
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if design == "blocks":
        row["blocks"] = {k: counts[k] for k in ("blocks", "rows", "bytes")}
    return row


BLOCKS_DEFAULT = CoreQueryKinds.TERMS_BLOCKS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("designs", nargs="+", help="blocks, buffers, or blocks:CELLS,CENTRE_CELLS,GATE,FILL")
    p.add_argument("--messages", required=True)
    p.add_argument("--subscriptions", required=True)
    p.add_argument("--window", type=int, required=True)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    rows = []
    for _ in range(args.rounds):
        for design in args.designs:
            rows.append(one_run(design, args))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
