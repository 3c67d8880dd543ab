"""Hybrid distributions (spec §5.2): ``spatial-first`` and ``keyword-first``, N1 x N2 partitions.

* ``spatial-first``: the location method (Algorithm 3) cuts space into N1 regions; inside each
  region, the prefix method (Algorithm 4 over loose prefixes, with that region's own keyword
  summaries) cuts the vocabulary into N2 ranges, built from the region's subscriptions and the
  whole sample (messages reach every region).
* ``keyword-first``: the prefix method cuts the vocabulary into N1 ranges; inside each range, the
  location method cuts space into N2 regions, built from the subscriptions and sample messages
  routed to that range.

Global partition id = ``outer * N2 + inner``.  A record goes to the inner partitions chosen by the
inner method of every outer partition it goes to.  **Meeting** follows from both levels: if
``ST(s, m) >= theta_s``, the outer method sends s and m to a common outer partition j (location:
m reaches every region; prefix: Lemma 7), and inner method j, which has s registered with the
same theta_s, sends both to a common inner partition.  **Lazy reallocation**: a fall of theta_s
adds outer partitions (keyword-first), where s is routed afresh by the inner method, and inner
partitions inside the outer partitions s already has (spatial-first); both are returned.

N1 defaults to the largest divisor of P not above sqrt(P) (P = 32: 4 x 8; a prime P gives
1 x P, the inner method alone); pass ``n1`` to choose.  Routing loops over the N1 outer
partitions, each step vectorised over the batch.
"""

from __future__ import annotations

import math

import numpy as np

from skype.partitioning.base import Distribution, check_num_partitions, check_thresholds
from skype.partitioning.location import LocationDistribution
from skype.partitioning.ranges import PrefixDistribution
from skype.partitioning.registry import SubscriptionTable, check_unique_ids
from skype.partitioning.routing import Routing
from skype.errors import InputError
from skype.model import Bounds, DEFAULT_BOUNDS, MessageBatch, SubscriptionBatch
from skype.text import Vocabulary


def default_outer(num_partitions: int) -> int:
    """Largest divisor of P that is <= sqrt(P).

    >>> [default_outer(p) for p in (4, 8, 16, 32, 64, 128, 7)]
    [2, 2, 4, 4, 8, 8, 1]
    """
    return max(d for d in range(1, math.isqrt(num_partitions) + 1) if num_partitions % d == 0)


def _group(rows: np.ndarray, parts: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """[(partition, rows sent there)] for the partitions that receive something."""
    if len(parts) == 0:
        return []
    order = np.argsort(parts, kind="stable")
    parts_sorted = parts[order]
    cuts = np.flatnonzero(np.r_[True, parts_sorted[1:] != parts_sorted[:-1], True])
    return [(int(parts_sorted[a]), rows[order[a:b]]) for a, b in zip(cuts[:-1], cuts[1:])]


class CompositeDistribution(Distribution):
    """An outer method with N1 partitions, and one inner method of N2 partitions in each."""

    def __init__(self, name: str, outer: Distribution, inners: list[Distribution]) -> None:
        self.name = name
        self.outer = outer
        self.inners = inners
        self.n1 = outer.num_partitions
        self.n2 = inners[0].num_partitions
        self.num_partitions = self.n1 * self.n2
        self.table = SubscriptionTable()  # records, to place a subscription in a new outer partition

    @classmethod
    def build(cls, name: str, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None,
              vocabulary: Vocabulary | None, thresholds: np.ndarray | None = None, *, n1: int | None = None,
              bounds: Bounds = DEFAULT_BOUNDS, summary: bool = True, cut: str = "balanced") -> CompositeDistribution:
        num_partitions = check_num_partitions(num_partitions)
        thresholds = check_thresholds(thresholds, len(subscriptions))
        n1 = default_outer(num_partitions) if n1 is None else check_num_partitions(n1)
        if num_partitions % n1:
            raise InputError("E023", what="n1 (outer partitions)", expected=f"a divisor of {num_partitions}", value=n1)
        n2 = num_partitions // n1
        check_unique_ids(subscriptions.ids)
        if sample is None:
            none = np.zeros(0)
            sample = MessageBatch(np.zeros(0, np.int64), none, none, none, subscriptions.terms.take(np.zeros(0, np.int64)))
        outer: Distribution
        if name == "spatial-first":
            outer = LocationDistribution.build(n1, subscriptions, sample, bounds=bounds)

            def inner(subs, msgs, theta):
                return PrefixDistribution.build(n2, subs, msgs, vocabulary, theta, summary=summary, cut=cut)
        elif name == "keyword-first":
            outer = PrefixDistribution.build(n1, subscriptions, sample, vocabulary, thresholds, summary=summary, cut=cut)

            def inner(subs, msgs, theta):
                return LocationDistribution.build(n2, subs, msgs, bounds=bounds)
        else:
            raise AssertionError(name)
        sub_rows, sub_outer = outer.route_subscriptions(subscriptions, thresholds).pairs()
        msg_rows, msg_outer = outer.route_messages(sample).pairs()
        by_sub = dict(_group(sub_rows, sub_outer))
        by_msg = dict(_group(msg_rows, msg_outer))
        empty = np.zeros(0, np.int64)
        inners = []
        for j in range(n1):
            rows = by_sub.get(j, empty)
            theta = thresholds[rows] if thresholds is not None else None
            inners.append(inner(subscriptions.take(rows), sample.take(by_msg.get(j, empty)), theta))
        dist = cls(name, outer, inners)
        dist.table.add(subscriptions, np.zeros(len(subscriptions), np.int64))
        outer.pop_new_live_terms()
        return dist

    def _combine(self, num_rows: int, pieces: list[tuple[int, np.ndarray, Routing]]) -> Routing:
        """Pieces (outer j, ascending batch rows, inner routing of those rows), in ascending j ->
        one global routing.  Global ids ``j * N2 + inner`` ascend with j, so laying each row's
        pieces out in j order keeps every row sorted: a counting layout, no sort."""
        counts = np.zeros(num_rows, dtype=np.int64)
        expanded = []
        for j, sel, routing in pieces:
            c = routing.counts()
            counts[sel] += c
            expanded.append((j, sel, c, routing.partitions))
        indptr = np.zeros(num_rows + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        out = np.empty(int(indptr[-1]), dtype=np.int32)
        fill = indptr[:-1].copy()
        for j, sel, c, parts in expanded:
            if len(parts) == 0:
                continue
            starts = np.repeat(fill[sel] - np.cumsum(c) + c, c)  # row's next free slot, minus offset
            out[starts + np.arange(len(parts))] = j * self.n2 + parts
            fill[sel] += c
        return Routing(indptr, out)

    def route_subscriptions(self, batch: SubscriptionBatch, thresholds: np.ndarray | None = None) -> Routing:
        thresholds = check_thresholds(thresholds, len(batch))
        check_unique_ids(batch.ids)
        self.remove_subscriptions(batch.ids)
        rows, outer = self.outer.route_subscriptions(batch, thresholds).pairs()
        pieces = []
        for j, sel in _group(rows, outer):
            theta = thresholds[sel] if thresholds is not None else None
            pieces.append((j, sel, self.inners[j].route_subscriptions(batch.take(sel), theta)))
        self.table.add(batch, np.zeros(len(batch), np.int64))
        return self._combine(len(batch), pieces)

    def route_messages(self, batch: MessageBatch) -> Routing:
        everyone = np.arange(len(batch), dtype=np.int64)
        if self.outer.broadcasts_messages:  # every outer partition routes the whole batch
            pieces = [(j, everyone, inner.route_messages(batch)) for j, inner in enumerate(self.inners)]
        else:
            rows, outer = self.outer.route_messages(batch).pairs()
            pieces = [(j, sel, Routing.broadcast(len(sel), self.n2) if self.inners[j].broadcasts_messages
                       else self.inners[j].route_messages(batch.take(sel))) for j, sel in _group(rows, outer)]
        return self._combine(len(batch), pieces)

    def update_thresholds(self, sub_ids: np.ndarray, thresholds: np.ndarray) -> Routing:
        ids = np.asarray(sub_ids, dtype=np.int64).reshape(-1)
        theta = check_thresholds(thresholds, len(ids))
        if theta is None:                      # no pruning: every threshold at 0
            theta = np.zeros(len(ids))
        check_unique_ids(ids)
        pieces = []
        all_rows = np.arange(len(ids), dtype=np.int64)
        for j, inner in enumerate(self.inners):  # grown prefixes inside outer partitions already held
            pieces.append((j, all_rows, inner.update_thresholds(ids, theta)))
        rows, outer = self.outer.update_thresholds(ids, theta).pairs()
        if len(rows):  # new outer partitions: route there afresh
            slots = self.table.slots_of(ids[rows])
            for j, sel in _group(rows[slots >= 0], outer[slots >= 0]):
                rec = self.table.records.take(self.table.slots_of(ids[sel]))
                pieces.append((j, sel, self.inners[j].route_subscriptions(rec, theta[sel])))
        return self._combine(len(ids), pieces)

    def remove_subscriptions(self, sub_ids: np.ndarray) -> None:
        ids = np.asarray(sub_ids, dtype=np.int64).reshape(-1)
        self.outer.remove_subscriptions(ids)
        for inner in self.inners:
            inner.remove_subscriptions(ids)
        self.table.remove(ids)

    def pop_new_live_terms(self) -> np.ndarray:
        parts = [self.outer.pop_new_live_terms()] + [inner.pop_new_live_terms() for inner in self.inners]
        return np.unique(np.concatenate(parts))

    def describe(self) -> dict:
        return {**super().describe(), "n1": self.n1, "n2": self.n2, "outer": self.outer.describe()}


def build_hybrid(name: str, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None = None,
                 vocabulary: Vocabulary | None = None, thresholds: np.ndarray | None = None,
                 **params) -> CompositeDistribution:
    """``spatial-first`` or ``keyword-first`` (see module docstring).

    >>> from skype.data import make_workload
    >>> w = make_workload("tweets", num_subs=300, num_messages=600, seed=4)
    >>> d = build_hybrid("spatial-first", 8, w.subscriptions, w.messages, w.vocabulary)
    >>> (d.n1, d.n2, d.num_partitions)
    (2, 4, 8)
    >>> r = d.route_messages(w.messages.slice(0, 100))
    >>> bool(((r.partitions >= 0) & (r.partitions < 8)).all())
    True
    """
    return CompositeDistribution.build(name, num_partitions, subscriptions, sample, vocabulary, thresholds, **params)
