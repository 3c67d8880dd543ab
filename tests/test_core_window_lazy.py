"""The top-k core's window stays asleep until a topk subscription registers: an empty
``SubscriptionBatch`` (what ``simulate`` passes for a workload without topk subscriptions)
registers nothing and does not wake it, so a range-only stream pays for the query window alone.
Results and change logs equal the reference's before and after the first topk subscription."""

from __future__ import annotations

import numpy as np

from skype import Bounds, Engine, Message, ReferenceEngine, Subscription
from skype.data import make_workload
from skype.queries import RangeSubscription

BOUNDS = Bounds(0.0, 0.0, 10.0, 10.0)


def test_empty_topk_batch_keeps_the_core_asleep_and_equals_reference():
    w = make_workload("tweets", num_subs=3, num_messages=10, seed=1)
    empty = w.subscriptions.slice(0, 0)
    assert len(empty) == 0
    rng = np.random.default_rng(4)
    ranges = [RangeSubscription(i, (x, y, x + 4, y + 4), terms=["tea", "bun"]) for i, (x, y) in
              enumerate(zip(rng.uniform(0, 6, 8), rng.uniform(0, 6, 8)))]
    engines = [Engine(bounds=BOUNDS, window=30, snapshots=True), ReferenceEngine(bounds=BOUNDS, window=30)]
    logs: list[list] = [[], []]
    for i, e in enumerate(engines):
        r = np.random.default_rng(5)
        e.subscribe_batch(ranges)
        e.subscribe_batch(empty)
        for j in range(100):
            if j == 60:
                if i == 0:
                    assert e.stats()["core_window"] != "kept"
                logs[i].append(e.subscribe(Subscription(100, 5.0, 5.0, 3, 0.5, terms={"tea": 1.0})))
                if i == 0:
                    assert e.stats()["core_window"] == "kept"
            terms = {str(n): 1.0 for n in r.choice(["tea", "bun", "cake"], size=int(r.integers(1, 3)), replace=False)}
            changes = e.publish(Message(j, float(r.uniform(0, 10)), float(r.uniform(0, 10)), t=float(j), terms=terms))
            logs[i].append(sorted((c.sub_id, sorted(c.entered), sorted(c.left)) for c in changes))
    assert logs[0] == logs[1]
    assert sum(len(step) for step in logs[0][:60]) > 20          # range matches before the wake
