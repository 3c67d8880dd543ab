"""What routing messages by the units' keyword summaries could save an adaptive method, at best.

    python bench/summary_routing_floor.py --dataset tweets --num-subs 20000 --num-messages 20000 \\
        --window 5000 --method agrid --partitions 16 --first 5000 --last 15000

A keyword-summary router sends a message to partition q when a term of the message is held by a
subscription hosted on q (and, to stay exact, also when the message lies where a subscription of
q could admit it on distance alone, which only adds partitions).  So the number of partitions
whose hosted subscriptions share a term with the message is a *floor* of that router's
communication: this script builds the method's distribution as ``distributed`` does
(:func:`skype.dskype.plan.build_distribution_for`), places every subscription, and counts, for the
messages at positions ``[--first, --last)``, the partitions whose summary meets each.  Compare it
with ``bench/exact_routing_bound.py``, the least any exact router could do on the same run, and
with P, what the adaptive methods send today.  Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def summary_floor(distribution, subscriptions, messages, first: int, last: int) -> np.ndarray:
    """Per message of ``[first, last)``: the partitions whose hosted subscriptions hold a term of it."""
    rows, parts = distribution.route_subscriptions(subscriptions).pairs()
    vocab = int(max(subscriptions.terms.ids.max(), messages.terms.ids.max())) + 1
    held = np.zeros((distribution.num_partitions, vocab), bool)  # partition x term: a hosted record holds it
    held[np.repeat(parts, subscriptions.terms.lengths()[rows]), subscriptions.terms.take(rows).ids] = True
    window = messages.slice(first, last)
    msg_rows = np.repeat(np.arange(len(window)), window.terms.lengths())
    counts = np.zeros(len(window), np.int64)
    for q in range(distribution.num_partitions):
        meets = np.zeros(len(window), bool)
        meets[msg_rows[held[q, window.terms.ids]]] = True
        counts += meets
    return counts


def main(argv: list[str] | None = None) -> dict:
    from skype.cli.inputs import DEFAULT_WINDOW, add_workload_args, load_inputs
    from skype.dskype.plan import RunSettings, build_distribution_for
    from skype.partitioning import METHODS

    p = argparse.ArgumentParser(prog="python bench/summary_routing_floor.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(p)
    p.add_argument("--method", choices=METHODS, default="agrid")
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--first", type=int, required=True, help="first message position counted")
    p.add_argument("--last", type=int, required=True, help="first message position not counted")
    args = p.parse_args(argv)
    inputs = load_inputs(args)
    settings = RunSettings(methods=(args.method,), partitions=args.partitions, batch_size=1000, window_kind="count",
                           window_size=float(args.window or DEFAULT_WINDOW), bounds=inputs.bounds.as_tuple())
    dist = build_distribution_for(settings, args.method, inputs)
    counts = summary_floor(dist, inputs.subscriptions, inputs.messages(), args.first, args.last)
    out = {"method": args.method, "partitions": args.partitions, "subscriptions": len(inputs.subscriptions),
           "messages": int(len(counts)), "mean": float(counts.mean()), "median": float(np.median(counts)),
           "p90": float(np.percentile(counts, 90)), "reaches_none": float(np.mean(counts == 0))}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
