"""SSTD's QT (quad-text) tree (Chen et al., PVLDB 2020, §3): quadrant and textual splits.

Build (Algorithm 1): a max-heap of leaves by load; the heaviest leaf is split either spatially
(four equal quadrants of its cell rectangle; two halves when it is one cell thick) or textually
(four children sharing its rectangle, each a range of term ids), whichever gives the smaller
summed load (Eq. 2, here the layer's ``W = |S| * |M|``, see :mod:`skype.partitioning.regions`),
until ``leaf_factor * P`` leaves (SSTD's theta; at most one per 16 subscriptions).  Leaves are assigned to the P partitions by
Karmarkar-Karp differencing; since a partition's load is not the sum of its leaves' estimates
(its summary is a union), ``calibrate`` rounds of the SSTD adjustment then run on the sample.

Textual children use ``SINGLE`` mode: a subscription belongs to the one child whose range holds
its first placed (rarest) term, and all its placed terms enter that child's summary.  So
replication stays 1, and similar subscriptions (same rare term) share a leaf: SSTD's
co-location of similar objects, with subscriptions in the role of the stored side.  A textual
child is never split spatially (its rectangle is shared by its siblings); it may be split by
text again.

Statistics: per leaf (unit) its load from candidate pairs and replicas, its bytes; the SSTD
policy (PM -> FM -> FG) reassigns leaves with Karmarkar-Karp and the Hungarian assignment.
"""

from __future__ import annotations

import heapq

import numpy as np

from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch
from skype.partitioning.agrid import vocabulary_size
from skype.partitioning.base import check_num_partitions, check_thresholds
from skype.partitioning.numberpart import karmarkar_karp
from skype.partitioning.rects import Rect
from skype.partitioning.regions import TERM_END, Leaf, LeafEvaluator, assemble
from skype.partitioning.units import DEFAULT_GRID, SINGLE, Grid, UnitDistribution, check_grid
from skype.text import Vocabulary


def quadrants(rect: Rect) -> list[Rect]:
    """The four quadrants of a rectangle (two halves, or none, when it is one cell thick).

    >>> quadrants((0, 0, 4, 2))
    [(0, 0, 2, 1), (2, 0, 4, 1), (0, 1, 2, 2), (2, 1, 4, 2)]
    >>> quadrants((0, 0, 1, 3)), quadrants((5, 5, 6, 6))
    ([(0, 0, 1, 1), (0, 1, 1, 3)], [])
    """
    x0, y0, x1, y1 = rect
    xs = [x0, (x0 + x1) // 2, x1] if x1 - x0 > 1 else [x0, x1]
    ys = [y0, (y0 + y1) // 2, y1] if y1 - y0 > 1 else [y0, y1]
    out = [(a, c, b, d) for c, d in zip(ys[:-1], ys[1:]) for a, b in zip(xs[:-1], xs[1:])]
    return out if len(out) > 1 else []


class QtDistribution(UnitDistribution):
    """SSTD's QT-tree (see module docstring).

    >>> from skype.data import make_workload
    >>> w = make_workload("geonames", num_subs=400, num_messages=800, seed=2)
    >>> d = QtDistribution.build(8, w.subscriptions, w.messages, w.vocabulary, grid=(32, 16))
    >>> int(d.route_subscriptions(w.subscriptions).counts().max())
    1
    """

    name = "qt"

    @classmethod
    def build(cls, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None = None,
              vocabulary: Vocabulary | None = None, thresholds: np.ndarray | None = None, *,
              grid: tuple[int, int] = DEFAULT_GRID, bounds: Bounds = DEFAULT_BOUNDS,
              leaf_factor: int = 8, calibrate: int = 4) -> QtDistribution:
        num_partitions = check_num_partitions(num_partitions)
        thresholds = check_thresholds(thresholds, len(subscriptions))
        g = Grid(*check_grid(grid), bounds)
        vocab_size = vocabulary_size(vocabulary, subscriptions, sample)
        ev = LeafEvaluator(g, subscriptions, sample, thresholds, vocab_size, SINGLE)
        root = ev.evaluate(Leaf((0, 0, g.nx, g.ny), 0, TERM_END))
        heap = [(-root.load, 0, root)]
        done: list[Leaf] = []
        counter = 1
        target = max(num_partitions, min(leaf_factor * num_partitions, len(subscriptions) // 16))
        while heap and len(heap) + len(done) < target:
            _, _, leaf = heapq.heappop(heap)
            options = []
            if leaf.lo == 0 and leaf.hi == TERM_END:
                quads = [ev.evaluate(Leaf(r, 0, TERM_END)) for r in quadrants(leaf.rect)]
                if quads:
                    options.append(quads)
            text = ev.text_split(leaf, 4)
            if text and len(text) > 1:
                options.append(text)
            if not options:
                done.append(leaf)
                continue
            for child in min(options, key=lambda kids: (sum(k.load for k in kids), len(kids))):
                heapq.heappush(heap, (-child.load, counter, child))
                counter += 1
        leaves = done + [leaf for _, _, leaf in heap]
        owner = karmarkar_karp(np.array([leaf.load for leaf in leaves]), num_partitions)
        tables = assemble(g, leaves, owner.tolist(), SINGLE)
        dist = cls("qt", num_partitions, g, *tables, vocab_size)
        dist.route_subscriptions(subscriptions, thresholds)
        dist.pop_new_live_terms()
        if calibrate:
            from skype.partitioning.rebalance import calibrate as refine

            return refine(dist, sample, "sstd", calibrate, lam=1.05, max_fraction=1.0)
        return dist
