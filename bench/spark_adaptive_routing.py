"""Deterministic counters of the adaptive methods' routing on Spark: what the runtime routes today
against routing by ownership and keyword summaries (issue 25, deliverable 2).

For each adaptive method and partition count the distribution is built exactly as
``python -m skype.run distributed`` builds it (:func:`skype.dskype.plan.build_distribution_for`:
exact mode, ``theta = 0``), then two routings of the same stream are counted:

* ``today``: the runtime's :class:`skype.dskype.routing.Router` (the ``everywhere`` mode, table
  version 0): message rows routed per message (every message to every partition), command rows
  per subscribe (each to its record's owner), and the records the busiest partition keeps, those
  it hosts (owner of the home unit under version 0; until issue 25's deliverable 2 every
  partition also kept a ledger of all S records, ``bench/spark_adaptive_records.py`` counts both);
* ``by_summaries``: the distribution layer's own routing (:mod:`skype.partitioning.units`), which
  is what routing by ownership and summaries sends: each subscription to the owners of its units
  (its replicas), each message to the partitions whose summary holds one of its terms (the
  meeting argument of ``units.py`` makes this exact); the records hosted per partition, the
  replication ratio, and the message rows per message;
* ``prefix_*``: the same with *loose prefixes* (``theta_s`` estimated over a warm-up window of
  ``--window`` messages, as ``partition-sim`` does): only a subscription's loose-prefix terms are
  live.  On Spark that needs an activation scheme like ``prefix``'s (thresholds proven by the
  engine, :mod:`skype.dskype.activation`), which the adaptive methods do not have: the column
  says what it would buy.

The targets of issue 25 at P = 16 on tweets: rows per message <= P/2 and the busiest partition's
records <= 1.5 x S/P x replication ratio (``meets_*`` columns).  Counters only: no timing, no
Spark session, the same figures on every machine for a seed.  Usage::

    nice python bench/spark_adaptive_routing.py --num-subs 20000 --num-messages 20000 \\
        --partitions 2,4,8,16 [--methods agrid,kdt,qt,aqwa] [--text-first] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

import numpy as np


def thresholds(inputs, window: int) -> np.ndarray:
    """theta_s of every initial subscription after a warm-up window (partition-sim's estimate)."""
    from skype.partitioning import estimate_thresholds

    messages = inputs.messages()
    warm = messages.slice(0, min(window, len(messages)))
    return estimate_thresholds(inputs.subscriptions, warm, inputs.vocabulary, len(warm), bounds=inputs.bounds)


def prefix_counters(method: str, partitions: int, inputs, theta: np.ndarray, sample_size: int) -> dict:
    """Rows per message and replication when only loose-prefix terms are live."""
    from skype.partitioning import build_distribution

    messages = inputs.messages()
    dist = build_distribution(method, partitions, inputs.subscriptions, messages.slice(0, sample_size),
                              inputs.vocabulary, theta)
    placed = dist.route_subscriptions(inputs.subscriptions, theta)
    _, pparts = placed.pairs()
    hosted = np.bincount(pparts.astype(np.int64), minlength=partitions)
    replication = float(len(pparts)) / max(len(inputs.subscriptions), 1)
    per_message = float(dist.route_messages(messages).counts().sum()) / max(len(messages), 1)
    return {"prefix_rows_per_message": round(per_message, 3), "prefix_replication": round(replication, 3),
            "prefix_hosted_max": int(hosted.max())}


def text_first_counters(partitions: int, inputs, sample_size: int) -> dict:
    """The same counters for a text-first layout, for reference: ``keyword`` with keyword
    summaries (a subscription on the partition of each of its terms, a message where one of its
    terms is live)."""
    from skype.partitioning import build_distribution

    subs, messages = inputs.subscriptions, inputs.messages()
    dist = build_distribution("keyword", partitions, subs, messages.slice(0, sample_size), inputs.vocabulary, None,
                              summary=True)
    _, pparts = dist.route_subscriptions(subs, None).pairs()
    hosted = np.bincount(pparts.astype(np.int64), minlength=partitions)
    replication = float(len(pparts)) / max(len(subs), 1)
    per_message = float(dist.route_messages(messages).counts().sum()) / max(len(messages), 1)
    bound = 1.5 * len(subs) / partitions * replication
    return {"method": "keyword+summaries", "partitions": partitions, "subscriptions": len(subs),
            "messages": len(messages), "rows_per_message": round(per_message, 3), "replication": round(replication, 3),
            "hosted_max": int(hosted.max()), "hosted_bound": round(bound, 1),
            "meets_rows": bool(per_message <= partitions / 2), "meets_hosted": bool(hosted.max() <= bound)}


def counters(method: str, partitions: int, args, inputs) -> dict:
    """The two routings' counters for one method and partition count (module docstring)."""
    from skype.dskype.plan import RunSettings
    from skype.dskype.codec import OP_SUB, Commands
    from skype.dskype.handover import TableVersion, UnitLocator, write_version
    from skype.dskype.plan import build_distribution_for
    from skype.dskype.routing import Router, routing_copy

    args.method, args.partitions = (method,), partitions
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    t0 = time.perf_counter()
    dist = build_distribution_for(settings, method, inputs)
    build_s = time.perf_counter() - t0
    subs = inputs.subscriptions
    messages = inputs.messages()
    S, M, P = len(subs), len(messages), partitions

    # today: every message to every partition, each command to its owner under version 0
    tables = tempfile.mkdtemp(prefix="adaptive-routing-")
    write_version(tables, TableVersion(0, 0, -1, UnitLocator.of(dist)))
    router = Router(routing_copy(dist), list(range(P)), tables_dir=tables)
    n = len(subs)
    cmds = Commands(np.arange(n, dtype=np.int64), np.full(n, -1, np.int64), np.full(n, OP_SUB, np.int8), subs,
                    np.zeros(n, np.int32), None)
    parts = router.route(messages, np.arange(M, dtype=np.int64), cmds, (0, 0))
    shutil.rmtree(tables)
    today_rows = sum(p.num_messages for p in parts.values())
    hosted_today = np.bincount(UnitLocator.of(dist).home_partitions(subs), minlength=P)

    # by ownership and summaries: the distribution layer's placements and summary routing
    placed = dist.route_subscriptions(subs, None)  # the same ids again: the same placements
    _, pparts = placed.pairs()
    hosted = np.bincount(pparts.astype(np.int64), minlength=P)
    replication = float(len(pparts)) / max(S, 1)
    routed = dist.route_messages(messages)
    per_message = float(routed.counts().sum()) / max(M, 1)
    bound = 1.5 * S / P * replication
    return {"method": method, "partitions": P, "subscriptions": S, "messages": M, "build_s": round(build_s, 1),
            "today_rows_per_message": today_rows / max(M, 1), "today_commands_per_subscribe":
                sum(len(Commands.unpack(p.commands)) for p in parts.values() if p.commands) / max(S, 1),
            "today_kept_max": int(hosted_today.max()), "today_hosted_max": int(hosted_today.max()),
            "rows_per_message": round(per_message, 3), "replication": round(replication, 3),
            "hosted_max": int(hosted.max()), "hosted_mean": round(float(hosted.mean()), 1),
            "hosted_bound": round(bound, 1), "meets_rows": bool(per_message <= P / 2), "meets_hosted": bool(hosted.max() <= bound)}


def main(argv: list[str] | None = None) -> int:
    from skype.simulate import load_inputs
    from skype.run import build_parser

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-subs", type=int, default=20_000)
    p.add_argument("--num-messages", type=int, default=20_000)
    p.add_argument("--partitions", default="2,4,8,16")
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--methods", default="agrid,kdt,qt,aqwa")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=int, default=10_000, help="warm-up window of the loose-prefix estimate")
    p.add_argument("--no-prefix", action="store_true", help="skip the loose-prefix columns")
    p.add_argument("--text-first", action="store_true",
                   help="also count keyword with summaries (a text-first layout), for reference")
    p.add_argument("--json", default=None, help="also append the rows to this JSON-lines file")
    a = p.parse_args(argv)
    args = build_parser().parse_args(["distributed", "--dataset", a.dataset, "--num-subs", str(a.num_subs),
                                      "--num-messages", str(a.num_messages), "--window", str(a.window),
                                      "--seed", str(a.seed)])
    inputs = load_inputs(vars(args))
    print(f"# {a.dataset}, {a.num_subs:,} subscriptions, {a.num_messages:,} messages, seed {a.seed}")
    theta = None if a.no_prefix else thresholds(inputs, a.window)
    for method in a.methods.split(","):
        for parts in (int(x) for x in a.partitions.split(",")):
            row = counters(method, parts, args, inputs)
            if theta is not None:
                row.update(prefix_counters(method, parts, inputs, theta, args.sample_size))
            print(json.dumps(row), flush=True)
            if a.json:
                with open(a.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    for parts in (int(x) for x in a.partitions.split(",")) if a.text_first else ():
        row = text_first_counters(parts, inputs, args.sample_size)
        print(json.dumps(row), flush=True)
        if a.json:
            with open(a.json, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
