"""Measuring a distribution: replication, communication, per-partition load, routing time.

Definitions (used by the ``partition-sim`` simulator and by the tests alike):

* **replication ratio**: copies per subscription, ``sum_i |S_i| / |S|``.
* **communication per message** (the paper's measure, spec §5.1): copies per message,
  ``sum_i |M_i| / |M|``, where ``M_i`` are the streamed messages routed to partition i.
* **load of partition i**: ``|S_i| * |M_i|``, the subscription replicas placed there times the
  messages routed there, i.e. the (subscription, message) pairs that *meet* there.  It is the
  quantity ``Cost = |S| * P`` of Algorithms 3-4 estimates, an upper bound on the pairs an engine
  may have to consider there, and it ignores what the engine's index prunes (spatially for all
  methods, textually for hashing and location).
* **load imbalance**: ``max_i load_i / mean_i load_i`` over all P partitions (empty ones count
  as 0); 1 is perfect balance.
* **postings of partition i**: what its engine's term index scans: for every message routed there
  and every term of the message, the subscription replicas there holding that term.  It follows
  the measured engine work of the term methods far better than the load (``prefix`` on tweets,
  ``docs/results-spark.md``); **postings imbalance** is its max / mean.
* **routing time**: wall time of ``route_messages`` over whole batches of ``batch_size``
  messages, divided by the number of messages (and likewise for subscriptions).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from skype.partitioning.base import Distribution
from skype.partitioning.routing import Routing
from skype.model import MessageBatch, SubscriptionBatch


def partition_loads(sub_routing: Routing, msg_routing: Routing, num_partitions: int):
    """(replicas per partition, messages per partition, load = their product) as arrays."""
    replicas = sub_routing.partition_sizes(num_partitions)
    messages = msg_routing.partition_sizes(num_partitions)
    return replicas, messages, replicas.astype(np.float64) * messages


def routed_postings(sub_routing: Routing, msg_routing: Routing, subscriptions: SubscriptionBatch,
                    stream: MessageBatch, num_partitions: int) -> np.ndarray:
    """Postings per partition (module docstring), as float64: the holders of each (partition,
    term) times the routed messages' term incidences, one sparse product.

    >>> from skype.model import TermMatrix
    >>> subs = SubscriptionBatch([1, 2], [0.1, 0.2], [0.1, 0.2], [1, 1], [0.5, 0.5],
    ...                          TermMatrix([0, 2, 3], [0, 2, 2], [0.6, 0.8, 1.0]))  # {0, 2} and {2}
    >>> msgs = MessageBatch([0, 1], [0.1, 0.1], [0.1, 0.1], [0.0, 0.0], TermMatrix([0, 1, 3], [2, 0, 2], [1.0, 0.6, 0.8]))
    >>> # both subscriptions on both partitions; message {2} to 0 (2), message {0, 2} to 0 and 1 (1 + 2)
    >>> routed_postings(Routing.broadcast(2, 2), Routing([0, 1, 3], [0, 0, 1]), subs, msgs, 2).tolist()
    [5.0, 3.0]
    """
    import scipy.sparse as sp

    vocab = 1 + int(max(subscriptions.terms.ids.max(initial=-1), stream.terms.ids.max(initial=-1), 0))
    s_rows, s_parts = sub_routing.pairs()
    sub_lens = subscriptions.terms.lengths()[s_rows]
    holders = sp.csr_matrix((np.ones(int(sub_lens.sum())), (np.repeat(s_parts, sub_lens),
                                                            subscriptions.terms.take(s_rows).ids)),
                            shape=(num_partitions, vocab))
    incidence = sp.csr_matrix((np.ones(len(stream.terms.ids)),
                               (np.repeat(np.arange(len(stream)), stream.terms.lengths()), stream.terms.ids)),
                              shape=(len(stream), vocab))
    per_pair = (incidence @ holders.T).tocsr()  # message x partition: postings if it went there
    m_rows, m_parts = msg_routing.pairs()
    return np.bincount(m_parts, weights=np.asarray(per_pair[m_rows, m_parts]).ravel(), minlength=num_partitions)


def load_imbalance(load: np.ndarray) -> float:
    mean = float(np.mean(load)) if len(load) else 0.0
    return float(np.max(load) / mean) if mean > 0 else 1.0


@dataclass
class RoutingReport:
    """What ``partition-sim`` reports for one (method, P)."""

    method: str
    num_partitions: int
    subscriptions: int
    messages: int
    replication_ratio: float
    communication_per_message: float
    load_imbalance: float
    route_us_per_message: float
    route_us_per_subscription: float
    build_s: float
    max_replication: int
    max_communication: int
    total_load: float
    postings_imbalance: float = 1.0
    replicas_per_partition: list[int] = field(default_factory=list)
    messages_per_partition: list[int] = field(default_factory=list)
    load_per_partition: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def route_stream(dist: Distribution, stream: MessageBatch, batch_size: int) -> tuple[Routing, float]:
    """Route ``stream`` batch by batch; returns the whole routing and the seconds spent routing."""
    parts, spent = [], 0.0
    for batch in stream.batches(max(1, int(batch_size))):
        t0 = time.perf_counter()
        parts.append(dist.route_messages(batch))
        spent += time.perf_counter() - t0
    if not parts:
        return Routing.empty(0), 0.0
    indptr = [parts[0].indptr]
    offset = parts[0].indptr[-1]
    for r in parts[1:]:
        indptr.append(r.indptr[1:] + offset)
        offset += r.indptr[-1]
    return Routing(np.concatenate(indptr), np.concatenate([r.partitions for r in parts])), spent


def measure_routing(dist: Distribution, subscriptions: SubscriptionBatch, thresholds: np.ndarray | None,
                    stream: MessageBatch, *, batch_size: int = 1000, build_s: float = 0.0) -> RoutingReport:
    """Route the subscriptions (as one batch) and the stream (in batches) and measure them."""
    t0 = time.perf_counter()
    subs = dist.route_subscriptions(subscriptions, thresholds)
    sub_s = time.perf_counter() - t0
    msgs, msg_s = route_stream(dist, stream, batch_size)
    replicas, messages, load = partition_loads(subs, msgs, dist.num_partitions)
    postings = routed_postings(subs, msgs, subscriptions, stream, dist.num_partitions)
    n_sub, n_msg = max(len(subscriptions), 1), max(len(stream), 1)
    return RoutingReport(
        method=dist.name, num_partitions=dist.num_partitions, subscriptions=len(subscriptions),
        messages=len(stream), replication_ratio=float(replicas.sum() / n_sub),
        communication_per_message=float(messages.sum() / n_msg), load_imbalance=load_imbalance(load),
        route_us_per_message=1e6 * msg_s / n_msg, route_us_per_subscription=1e6 * sub_s / n_sub, build_s=build_s,
        max_replication=int(subs.counts().max(initial=0)), max_communication=int(msgs.counts().max(initial=0)),
        total_load=float(load.sum()), postings_imbalance=load_imbalance(postings), replicas_per_partition=replicas.tolist(),
        messages_per_partition=messages.tolist(), load_per_partition=load.tolist(),
    )
