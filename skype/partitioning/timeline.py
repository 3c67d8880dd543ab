"""A distribution method with a rebalancing policy, over time: the stream in intervals.

:func:`run_timeline` replays a stream of steps (``("msgs", batch)``, ``("sub", batch)``,
``("unsub", id)``) through a built distribution.  Subscriptions arriving mid-stream are routed
with theta = 0 (no result yet: the safe threshold); departing ones are removed.  Every
``interval`` messages it records, for that interval (definitions as in
:mod:`skype.partitioning.measure`):

* per partition: replicas (at the interval's end), messages routed during the interval, and
  their product, the load; the imbalance ``max / mean``;
* communication per message and replication ratio;
* then it folds the statistics (``FADING[policy]``), asks the policy for a plan and applies it:
  units, subscriptions (replicas) and bytes moved, the paper's cost estimate, the wall time of
  the decision.  Moves decided at the end of interval i take effect in interval i + 1.

The stream's hours come from the message timestamps, so moves can be reported per hour.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from skype.model import SubscriptionBatch
from skype.partitioning.base import Distribution
from skype.partitioning.measure import load_imbalance
from skype.partitioning.rebalance import FADING, apply_plan, check_policy, decide
from skype.partitioning.units import UnitDistribution


class ReplicaTally:
    """Replicas per partition for any method: from the units where the method has them, else
    from the routings of the registered subscriptions."""

    def __init__(self, dist: Distribution) -> None:
        self.dist = dist
        self.counts = np.zeros(dist.num_partitions, np.int64)
        self.rows: dict[int, np.ndarray] = {}

    def add(self, batch: SubscriptionBatch, routing) -> None:
        self.counts += routing.partition_sizes(self.dist.num_partitions)
        if not isinstance(self.dist, UnitDistribution):
            for i, sid in enumerate(batch.ids.tolist()):
                self.rows[sid] = routing.row(i).copy()

    def remove(self, sid: int) -> None:
        parts = self.rows.pop(sid, None)
        if parts is not None:
            np.subtract.at(self.counts, parts, 1)

    def replicas(self) -> np.ndarray:
        if isinstance(self.dist, UnitDistribution):
            return np.bincount(self.dist.owner, weights=self.dist.unit_subs,
                               minlength=self.dist.num_partitions).astype(np.int64)
        return self.counts


def run_timeline(dist: Distribution, policy: str, subscriptions: SubscriptionBatch, thresholds: np.ndarray | None,
                 steps: list[tuple[str, Any]], *, interval: int = 5000, batch_size: int = 1000,
                 policy_params: dict | None = None) -> dict:
    """Replay ``steps`` through ``dist`` with ``policy`` (module docstring); returns the report."""
    if policy != "never":
        check_policy(policy, dist.name)
    P = dist.num_partitions
    tally = ReplicaTally(dist)
    tally.add(subscriptions, dist.route_subscriptions(subscriptions, thresholds))
    live = len(subscriptions)
    intervals: list[dict] = []
    msgs_in = np.zeros(P, np.int64)
    copies = count = 0
    t_first = t_last = None
    route_s = 0.0

    def close_interval() -> None:
        nonlocal msgs_in, copies, count, t_first
        replicas = tally.replicas()
        load = replicas.astype(np.float64) * msgs_in
        rec: dict[str, Any] = {
            "interval": len(intervals), "messages": count, "t_start": t_first, "t_end": t_last,
            "subscriptions": live, "imbalance": load_imbalance(load),
            "communication_per_message": copies / max(count, 1),
            "replication_ratio": float(replicas.sum() / max(live, 1)),
            "load_per_partition": load.tolist(), "replicas_per_partition": replicas.tolist(),
            "messages_per_partition": msgs_in.tolist(),
        }
        moved = nbytes = 0
        if isinstance(dist, UnitDistribution) and policy != "never":
            dist.fold_statistics(FADING[policy])
            t0 = time.perf_counter()
            plan = decide(policy, dist, **(policy_params or {}))
            moved, nbytes = apply_plan(dist, plan)
            rec["decide_s"] = time.perf_counter() - t0
            rec["plan"] = plan.summary()
        elif isinstance(dist, UnitDistribution):
            dist.fold_statistics(0.0)
        rec["subscriptions_moved"] = moved
        rec["bytes_moved"] = nbytes
        intervals.append(rec)
        msgs_in = np.zeros(P, np.int64)
        copies = count = 0
        t_first = None

    leaving: list[int] = []
    for index, (op, payload) in enumerate(steps):
        if op == "unsub":
            tally.remove(int(payload))
            leaving.append(int(payload))
            live -= 1
            if index + 1 < len(steps) and steps[index + 1][0] == "unsub":
                continue  # consecutive departures leave in one call
            dist.remove_subscriptions(np.array(leaving, np.int64))
            leaving = []
        elif op == "sub":
            tally.add(payload, dist.route_subscriptions(payload, np.zeros(len(payload))))
            live += len(payload)
        else:
            for batch in payload.batches(batch_size):
                pos = 0
                while pos < len(batch):
                    take = min(len(batch) - pos, interval - count)
                    part = batch.slice(pos, pos + take)
                    t0 = time.perf_counter()
                    routing = dist.route_messages(part)
                    route_s += time.perf_counter() - t0
                    msgs_in += routing.partition_sizes(P)
                    copies += int(routing.counts().sum())
                    if t_first is None:
                        t_first = float(part.t[0])
                    t_last = float(part.t[-1])
                    count += take
                    pos += take
                    if count >= interval:
                        close_interval()
    if count:
        close_interval()
    hours = 0.0
    if intervals and intervals[0]["t_start"] is not None and intervals[-1]["t_end"] is not None:
        hours = (intervals[-1]["t_end"] - intervals[0]["t_start"]) / 3600.0
    total_moved = int(sum(r["subscriptions_moved"] for r in intervals))
    peak_subs = max([r["subscriptions"] for r in intervals] + [len(subscriptions)])
    imb = [r["imbalance"] for r in intervals]
    return {
        "method": dist.name, "policy": policy, "num_partitions": P, "interval_messages": interval,
        "intervals": intervals, "stream_hours": hours,
        "imbalance_first": imb[0] if imb else 1.0, "imbalance_last": imb[-1] if imb else 1.0,
        "imbalance_max": max(imb) if imb else 1.0, "imbalance_max_after_first": max(imb[1:]) if len(imb) > 1 else 1.0,
        "subscriptions_moved": total_moved, "bytes_moved": int(sum(r["bytes_moved"] for r in intervals)),
        "moved_fraction_per_hour": total_moved / max(peak_subs, 1) / hours if hours > 0 else 0.0,
        "communication_per_message": float(np.mean([r["communication_per_message"] for r in intervals])) if imb else 0.0,
        "route_us_per_message": 1e6 * route_s / max(sum(r["messages"] for r in intervals), 1),
    }
