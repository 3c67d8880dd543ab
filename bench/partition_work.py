"""What a partition's work is made of: per-partition engines in one process, no Spark (issue 37).

    python bench/partition_work.py --dataset tweets --num-subs 20000 --num-messages 50000 \
        --window 5000 --batch-size 2000 --methods location,prefix --partitions 8 --out work.json

**Protocol.**  One seeded workload.  Each method's distribution is built as a DSkype run builds
it (:func:`skype.dskype.plan.build_distribution_for`'s inputs: every subscription, the first
``--sample-size`` messages, thresholds estimated over the sample's last window).  Then, in this
process, one engine per partition:

* ``location``: the subscriptions of the partition's region, and *every* message (the method
  broadcasts), in a count window of ``--window`` messages: what a Spark partition runs.
* ``prefix``: a *static* stand-in for the Spark runtime's loose-prefix activation.  The
  partition holds the subscriptions whose loose prefix (under the estimated thresholds) has a
  term in its range, and receives the messages having a term held there (keyword summaries);
  its window is the last ``--window`` global sequence numbers (a time window over seq, as on
  Spark).  The runtime's replicas wake and sleep as thresholds move, so this is an estimate of
  its work, not a copy of it.

and one centralized engine over everything (``--window`` count window): the reference, the
same engine the ``P = 1`` run of ``location`` holds.  Each batch of ``--batch-size`` messages is
published to every engine that receives a part of it; per partition it keeps the engine's
deterministic counters (:mod:`skype.dskype.work`: postings, candidates, admissions,
re-evaluation work, arrivals, expirations) and its thread CPU seconds.  The first batches, until
the window is full, are counted apart (``warm``) from the steady ones (``steady``).

**Output.**  Per method: per-partition sums of every counter, messages received, subscriptions
held, CPU seconds; the busiest partition's share of the centralized work (CPU and each counter);
the sum over partitions over the centralized (the replication of work); per-message fixed work.
Counters are deterministic; CPU seconds are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from skype.dskype.work import COUNTERS, counter_delta, engine_counters
from skype.engine import Engine
from skype.model import MessageBatch
from skype.partitioning import METHOD_PARAMS, build_distribution, capabilities_of, estimate_thresholds
from skype.simulate import load_inputs

KEYS = tuple(COUNTERS) + ("cpu_s", "messages")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/partition_work.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--num-subs", type=int, default=20_000)
    p.add_argument("--num-messages", type=int, default=50_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=int, default=5_000)
    p.add_argument("--batch-size", type=int, default=2_000)
    p.add_argument("--sample-size", type=int, default=10_000)
    p.add_argument("--methods", default="location,prefix")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--range-cut", default="balanced",
                   help="prefix: the range cut(s), comma-separated (skype.partitioning.ranges.CUTS); several "
                        "run side by side against the same centralized run (default: %(default)s)")
    p.add_argument("--location-cut", default=None,
                   help="location: the KD cut (skype.partitioning.location.CUTS; default: the method's)")
    p.add_argument("--out", help="JSON of the figures")
    return p


class Tally:
    """Counters and CPU seconds of one engine, summed over warm and steady batches apart."""

    def __init__(self) -> None:
        self.warm = dict.fromkeys(KEYS, 0.0)
        self.steady = dict.fromkeys(KEYS, 0.0)

    def publish(self, engine, batch: MessageBatch, steady: bool, clock: float | None = None) -> None:
        before = engine_counters(engine)
        t0 = time.thread_time()
        if len(batch):
            engine.publish_batch(batch)
        if clock is not None and clock > engine.clock:
            engine.advance_log(clock)
        cpu = time.thread_time() - t0
        work = counter_delta(before, engine_counters(engine))
        work.pop("cpu_ns", None)
        into = self.steady if steady else self.warm
        for name in COUNTERS:
            into[name] += work.get(name, 0)
        into["cpu_s"] += cpu
        into["messages"] += len(batch)


def distribution_of(method: str, args, inputs, subs, messages, cut: str):
    sample = messages.slice(0, min(args.sample_size, len(messages)))
    theta = None
    if capabilities_of(method).thresholds:
        theta = estimate_thresholds(subs, sample, inputs.vocabulary, max(1, min(args.window, len(sample))),
                                    "auto", bounds=inputs.bounds)
    params: dict = {"bounds": inputs.bounds}
    if method == "prefix":
        params.update(summary=True, cut=cut)
    if method == "location" and args.location_cut:
        params["cut"] = args.location_cut
    params = {k: v for k, v in params.items() if k in METHOD_PARAMS[method]}
    return build_distribution(method, args.partitions, subs, sample, inputs.vocabulary, theta, **params), theta


def run_method(method: str, args, inputs, subs, messages, central: Tally, cut: str) -> dict:
    P = args.partitions
    dist, theta = distribution_of(method, args, inputs, subs, messages, cut)
    routing = dist.route_subscriptions(subs, theta)
    rows, parts = routing.pairs()
    broadcast = bool(getattr(dist, "broadcasts_messages", False))
    engines, held = [], []
    for p in range(P):
        mine = rows[parts == p]
        window = {"window": args.window} if broadcast else {"window_seconds": float(args.window)}
        engine = Engine(snapshots=False, bounds=inputs.bounds, vocabulary=inputs.vocabulary, **window)
        engine.subscribe_batch(subs.take(mine))
        engines.append(engine)
        held.append(len(mine))
    tallies = [Tally() for _ in range(P)]
    seq = 0
    for chunk in messages.batches(args.batch_size):
        steady = seq >= args.window
        times = np.arange(seq, seq + len(chunk), dtype=np.float64)
        timed = MessageBatch(chunk.ids, chunk.x, chunk.y, times, chunk.terms)
        m_routing = dist.route_messages(chunk)
        m_rows, m_parts = m_routing.pairs()
        for p in range(P):
            if broadcast:
                tallies[p].publish(engines[p], chunk, steady)
            else:
                tallies[p].publish(engines[p], timed.take(np.sort(m_rows[m_parts == p])), steady,
                                   clock=float(seq + len(chunk) - 1))
        seq += len(chunk)
    return {**summarize(method, P, tallies, central, held, dist), "cut": cut if method == "prefix" else None}


def summarize(method: str, P: int, tallies: list[Tally], central: Tally, held: list[int], dist) -> dict:
    out: dict = {"method": method, "partitions": P, "subscriptions_per_partition": held,
                 "describe": {k: v for k, v in dist.describe().items() if k in ("range_starts", "regions")}}
    for phase in ("steady", "warm"):
        per = {k: [round(getattr(t, phase)[k], 4) for t in tallies] for k in KEYS}
        ref = getattr(central, phase)
        cpu = np.array(per["cpu_s"])
        busiest = int(np.argmax(cpu))
        out[phase] = {
            "per_partition": per, "central": {k: round(v, 4) for k, v in ref.items()},
            "busiest_by_cpu": busiest,
            "busiest_share": {k: (max(per[k]) / ref[k] if ref[k] else None) for k in KEYS},
            "sum_over_central": {k: (sum(per[k]) / ref[k] if ref[k] else None) for k in KEYS},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    inputs = load_inputs({"dataset": args.dataset, "num_subs": args.num_subs, "num_messages": args.num_messages,
                          "seed": args.seed, "sample_size": args.sample_size})
    subs, messages = inputs.subscriptions, inputs.messages()
    central_engine = Engine(snapshots=False, bounds=inputs.bounds, vocabulary=inputs.vocabulary, window=args.window)
    central_engine.subscribe_batch(subs)
    central = Tally()
    seq = 0
    for chunk in messages.batches(args.batch_size):
        central.publish(central_engine, chunk, seq >= args.window)
        seq += len(chunk)
    cuts = [c.strip() for c in args.range_cut.split(",") if c.strip()]
    rows = [run_method(m, args, inputs, subs, messages, central, cut)
            for m in (m.strip() for m in args.methods.split(",") if m.strip())
            for cut in (cuts if m == "prefix" else cuts[:1])]
    for r in rows:
        s = r["steady"]
        cpu = np.array(s["per_partition"]["cpu_s"])
        print(f"{r['method']} ({r['cut']}) P={r['partitions']}: cpu max/mean {cpu.max() / cpu.mean():.3f}, busiest/central " +
              ", ".join(f"{k} {v:.3f}" for k, v in s["busiest_share"].items() if v is not None) +
              " | sum/central " + ", ".join(f"{k} {v:.2f}" for k, v in s["sum_over_central"].items() if v is not None),
              file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps({"argv": sys.argv[1:], "runs": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
