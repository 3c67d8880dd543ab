"""Hashing distribution (spec §5.2, Eq. 14): ``pid(s) = h(s.id) mod P``; messages go everywhere.

``h`` is :func:`~skype.partitioning.routing.splitmix64`, so the partition of a subscription depends on its
id only (it is pure and independent of the process).  Every message is broadcast to all P
partitions, hence replication 1 and communication P per message (Table 2).  Meeting is trivial:
every partition sees every message.
"""

from __future__ import annotations

import numpy as np

from skype.partitioning.base import Distribution, check_num_partitions, check_thresholds
from skype.partitioning.routing import Routing, splitmix64
from skype.model import MessageBatch, SubscriptionBatch


def hash_partition(ids: np.ndarray, num_partitions: int) -> np.ndarray:
    """``splitmix64(id) mod P`` as int32.

    >>> hash_partition(np.array([0, 1, 2, 3]), 4).tolist()
    [3, 1, 2, 1]
    """
    return (splitmix64(ids) % np.uint64(num_partitions)).astype(np.int32)


class HashingDistribution(Distribution):
    """Eq. 14.

    >>> from skype.data import make_workload
    >>> w = make_workload("tweets", num_subs=8, num_messages=50, seed=1)
    >>> d = HashingDistribution.build(4, w.subscriptions)
    >>> d.route_subscriptions(w.subscriptions).counts().tolist()
    [1, 1, 1, 1, 1, 1, 1, 1]
    >>> d.route_messages(w.messages.slice(0, 2)).partitions.tolist()
    [0, 1, 2, 3, 0, 1, 2, 3]
    """

    name = "hashing"
    broadcasts_messages = True

    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = check_num_partitions(num_partitions)

    @classmethod
    def build(cls, num_partitions: int, subscriptions: SubscriptionBatch | None = None, *_, **__) -> HashingDistribution:
        return cls(num_partitions)

    def route_subscriptions(self, batch: SubscriptionBatch, thresholds: np.ndarray | None = None) -> Routing:
        check_thresholds(thresholds, len(batch))
        return Routing.one_each(hash_partition(batch.ids, self.num_partitions))

    def route_messages(self, batch: MessageBatch) -> Routing:
        return Routing.broadcast(len(batch), self.num_partitions)
