"""AQWA (Aly et al.): an adaptive kd-tree over a fine grid whose P leaves are the partitions.

The grid cells are the units (see :mod:`skype.partitioning.units`).  The kd-tree's leaves are
rectangles of cells, exactly P of them, leaf i owned by one partition.  Invariants: the leaves
tile the grid; every cell's owner is the partition of the leaf containing it; P stays constant
(a split is always paired with a merge of two sibling leaves, AQWA §3.5).

Build (§3.4, "data only"): starting from the whole grid, the leaf holding the most
subscriptions (the stored points here) is cut on the line, horizontal or vertical, that best
balances its subscription counts (read in O(1) from a prefix grid, §3.2), until P leaves.
(Balancing the sample's pair costs instead was tried: worse on geonames, 1.8 against 1.36.)  Then
``calibrate`` rounds of the AQWA policy's split + merge run on the sample (the paper adapts from
the first queries on; here the sample plays the first queries), keeping the best state.

Statistics (§3.2-3.3, 3.6): per cell, the subscriptions held and the messages located there
(the two count grids), and the candidate pairs per cell (Eq. 1's ``O_q * N`` with messages as the
queries: the (message, subscription) pairs that meet); each with an old and a new layer for time
fading.  The AQWA policy (split + merge with the Eq. 6 test) reads them and changes the tree
through :meth:`split_and_merge`.

Routing as for every unit method: a subscription to its leaf's partition, a message by keyword
summaries.
"""

from __future__ import annotations

import numpy as np

from skype.errors import InputError
from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch
from skype.partitioning.agrid import sample_cell_costs, vocabulary_size
from skype.partitioning.base import check_num_partitions, check_thresholds
from skype.partitioning.rects import KDTree, best_cut, prefix_grid, rect_cells, rect_sum
from skype.partitioning.units import DEFAULT_GRID, REPLICATE, Grid, UnitDistribution, check_grid
from skype.text import Vocabulary


class AqwaDistribution(UnitDistribution):
    """AQWA's kd-tree partitioning (see module docstring).

    >>> from skype.data import make_workload
    >>> w = make_workload("tweets", num_subs=400, num_messages=800, seed=2)
    >>> d = AqwaDistribution.build(8, w.subscriptions, w.messages, w.vocabulary, grid=(32, 16))
    >>> len(d.tree.leaves()), sorted(d.tree.leaf_of_part()) == list(range(8))
    (8, True)
    """

    name = "aqwa"

    def __init__(self, num_partitions: int, grid: Grid, tree: KDTree, vocab_size: int) -> None:
        n = grid.num_cells
        super().__init__("aqwa", num_partitions, grid, np.arange(n), np.ones(n, np.int64),
                         np.full(n, REPLICATE, np.int8), np.zeros(0, np.int64), self._owner(tree, grid), vocab_size)
        self.tree = tree

    @staticmethod
    def _owner(tree: KDTree, grid: Grid) -> np.ndarray:
        owner = np.zeros(grid.num_cells, np.int32)
        for leaf in tree.leaves():
            owner[rect_cells(tree.rect[leaf], grid.nx)] = tree.part[leaf]
        return owner

    @classmethod
    def build(cls, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None = None,
              vocabulary: Vocabulary | None = None, thresholds: np.ndarray | None = None, *,
              grid: tuple[int, int] = DEFAULT_GRID, bounds: Bounds = DEFAULT_BOUNDS,
              calibrate: int = 8) -> AqwaDistribution:
        num_partitions = check_num_partitions(num_partitions)
        thresholds = check_thresholds(thresholds, len(subscriptions))
        g = Grid(*check_grid(grid), bounds)
        if g.num_cells < num_partitions:
            raise InputError("E023", what="grid of method 'aqwa'", expected=f"at least P = {num_partitions} cells",
                             value=(g.nx, g.ny))
        vocab_size = vocabulary_size(vocabulary, subscriptions, sample)
        _, count = sample_cell_costs(g, subscriptions, None, thresholds, vocab_size)
        S = prefix_grid(count, g.nx, g.ny)
        tree = KDTree((0, 0, g.nx, g.ny))
        for part in range(1, num_partitions):
            splittable = [n for n in tree.leaves() if best_cut(S, tree.rect[n]) is not None]
            node = max(splittable, key=lambda n: (rect_sum(S, tree.rect[n]), -n))
            axis, line, _, _ = best_cut(S, tree.rect[node]) or (0, 0, 0.0, 0.0)
            tree.split(node, axis, line, part)
        dist = cls(num_partitions, g, tree, vocab_size)
        dist.route_subscriptions(subscriptions, thresholds)
        dist.pop_new_live_terms()
        if calibrate:
            from skype.partitioning.rebalance import calibrate as refine

            return refine(dist, sample, "aqwa", calibrate, trigger=1.05, beta=0.0)
        return dist

    def split_and_merge(self, ops: list[tuple[int, int, int, int]]) -> tuple[int, int]:
        """AQWA's paired changes, in order: for each ``(split_leaf, axis, line, merge_node)``,
        the two leaves under ``merge_node`` merge into its left child's partition and the right
        half of ``split_leaf`` takes the freed partition.  The units then move once, from their
        old owner to their final one.  Returns the (replicas, bytes) moved."""
        for split_leaf, axis, line, merge_node in ops:
            kids = self.tree.children[merge_node]
            if kids is None or split_leaf in kids or merge_node == split_leaf or self.tree.children[split_leaf]:
                raise InputError("E061", detail=f"leaf {split_leaf} cannot split while node {merge_node} merges")
            keep, freed = self.tree.part[kids[0]], self.tree.part[kids[1]]
            self.tree.merge(merge_node, keep)
            self.tree.split(split_leaf, axis, line, freed)
        owner = self._owner(self.tree, self.grid)
        changed = np.flatnonzero(owner != self.owner)
        return self.move_units(changed, owner[changed])

    def describe(self) -> dict:
        return {**super().describe(), "leaves": [list(self.tree.rect[n]) for n in self.tree.leaves()]}
