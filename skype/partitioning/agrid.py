"""A-Grid (Tornado, Mahmood et al. §3-4): a fine grid whose cells are tiled by P rectangles.

Every grid cell is a unit (see :mod:`skype.partitioning.units`); ``owner[cell]`` is its partition and
``rects[p]`` (Tornado's partitions map PM) the rectangle of cells partition p owns.  Rectangles do
not overlap and tile the grid (empty ones, ``(0, 0, 0, 0)``, only when the grid has fewer cells
than P).

Build (§4.1): cell costs come from the sample: per cell, the sample messages sharing a placed
loose-prefix term with each subscription there, summed (Eq. 1 with objects and queries
exchanged, since here subscriptions are placed by space and messages follow the keyword
summaries), plus one per subscription.  Greedy k-d: pop the costliest rectangle and cut it
horizontally or vertically where the larger half is smallest, until P rectangles.  A
partition's load ``|S_p| * |M_p|`` is not a sum of cell costs (its summary is a union), so
``calibrate`` more rounds re-weight every cell by its share of its partition's load measured on
the sample (``subscriptions * |M_p|``) and cut again; the most balanced layout is kept.

Routing: a subscription goes to the owner of its cell (replication 1); a message goes to every
partition whose keyword summary holds one of its terms (Tornado's textual summaries).
Statistics: per cell, candidate pairs and messages located there, per-cell query counts; the
row, column and overall aggregates of Tornado §4.3 are sums over the rectangles, read in O(1)
from prefix grids by the policy.  The Tornado policy (split/merge, shift; Eqs. 4-5) keeps every
partition a rectangle and updates ``rects`` through :meth:`set_rects`.
"""

from __future__ import annotations

import numpy as np

from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch
from skype.partitioning.base import check_num_partitions, check_thresholds
from skype.partitioning.prefix import loose_prefix_lengths
from skype.partitioning.rects import Rect, greedy_kd, prefix_grid, rect_cells
from skype.partitioning.units import DEFAULT_GRID, REPLICATE, Grid, UnitDistribution, candidate_costs, check_grid
from skype.text import Vocabulary


def vocabulary_size(vocabulary: Vocabulary | None, *batches) -> int:
    sizes = [len(vocabulary) if vocabulary is not None else 0, 1]
    for b in batches:
        if b is not None and len(b.terms.ids):
            sizes.append(int(b.terms.ids.max()) + 1)
    return max(sizes)


def sample_cell_costs(grid: Grid, subs: SubscriptionBatch, sample: MessageBatch | None, thresholds: np.ndarray | None,
                      vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(cost per cell, subscriptions per cell) from the build sample (module docstring)."""
    lengths = loose_prefix_lengths(subs.terms, subs.alpha, thresholds)
    cells = grid.cell_of(subs.x, subs.y)
    cost = np.bincount(cells, weights=candidate_costs(subs, sample, lengths, vocab_size), minlength=grid.num_cells)
    return cost, np.bincount(cells, minlength=grid.num_cells).astype(np.float64)


def owner_rects(owner: np.ndarray, nx: int, num_partitions: int) -> list[Rect]:
    """Bounding rectangle (half-open cell indices) of each partition's cells."""
    ix, iy = np.arange(len(owner)) % nx, np.arange(len(owner)) // nx
    big = len(owner) + 1
    x0, y0 = np.full(num_partitions, big), np.full(num_partitions, big)
    x1, y1 = np.zeros(num_partitions, np.int64), np.zeros(num_partitions, np.int64)
    np.minimum.at(x0, owner, ix)
    np.minimum.at(y0, owner, iy)
    np.maximum.at(x1, owner, ix + 1)
    np.maximum.at(y1, owner, iy + 1)
    return [(int(a), int(b), int(c), int(d)) if a < big else (0, 0, 0, 0) for a, b, c, d in zip(x0, y0, x1, y1)]


class AGridDistribution(UnitDistribution):
    """Tornado's A-Grid (see module docstring).

    >>> from skype.data import make_workload
    >>> w = make_workload("geonames", num_subs=400, num_messages=800, seed=2)
    >>> d = AGridDistribution.build(8, w.subscriptions, w.messages, w.vocabulary, grid=(32, 16))
    >>> r = d.route_subscriptions(w.subscriptions)
    >>> int(r.counts().max()), len(d.rects), d.num_units
    (1, 8, 512)
    """

    name = "agrid"

    def __init__(self, num_partitions: int, grid: Grid, rects: list[Rect], vocab_size: int) -> None:
        n = grid.num_cells
        owner = np.zeros(n, np.int32)
        for p, rect in enumerate(rects):
            owner[rect_cells(rect, grid.nx)] = p
        super().__init__("agrid", num_partitions, grid, np.arange(n), np.ones(n, np.int64),
                         np.full(n, REPLICATE, np.int8), np.zeros(0, np.int64), owner, vocab_size)

    @classmethod
    def build(cls, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None = None,
              vocabulary: Vocabulary | None = None, thresholds: np.ndarray | None = None, *,
              grid: tuple[int, int] = DEFAULT_GRID, bounds: Bounds = DEFAULT_BOUNDS,
              calibrate: int = 8) -> AGridDistribution:
        num_partitions = check_num_partitions(num_partitions)
        thresholds = check_thresholds(thresholds, len(subscriptions))
        g = Grid(*check_grid(grid), bounds)
        vocab_size = vocabulary_size(vocabulary, subscriptions, sample)
        weights, count = sample_cell_costs(g, subscriptions, sample, thresholds, vocab_size)
        tie = prefix_grid(count, g.nx, g.ny)
        best, best_imbalance, stale = None, np.inf, 0
        for _ in range(1 + (calibrate if sample is not None and len(sample) else 0)):
            rects = greedy_kd(prefix_grid(weights, g.nx, g.ny), (0, 0, g.nx, g.ny), num_partitions, tie=tie)
            dist = cls(num_partitions, g, rects, vocab_size)
            dist.route_subscriptions(subscriptions, thresholds)
            if sample is None or len(sample) == 0:
                best = dist
                break
            dist.route_messages(sample)
            load = dist.partition_cost()
            imbalance = float(load.max() / max(load.mean(), 1e-12))
            if imbalance < best_imbalance:
                best, best_imbalance, stale = dist, imbalance, 0
            else:
                stale += 1
                if stale == 2:  # two rounds without progress
                    break
            weights = count * dist.partition_messages()[dist.owner]  # each cell's share of the measured load
        assert best is not None
        best.reset_statistics()
        best.pop_new_live_terms()
        return best

    @property
    def rects(self) -> list[Rect]:
        """The partitions map PM: the bounding rectangle of each partition's cells ((0, 0, 0, 0)
        when it owns none).  The Tornado policy keeps every partition an exact rectangle."""
        return owner_rects(self.owner, self.grid.nx, self.num_partitions)

    def describe(self) -> dict:
        return {**super().describe(), "rects": [list(r) for r in self.rects]}
