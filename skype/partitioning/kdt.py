"""PS2Stream's hybrid kdt-tree (Chen et al., Alg. 1): kd-tree leaves, some split by text.

Build, from the sample (Alg. 1, with the layer's load ``W = |S| * |M|``, see
:mod:`skype.partitioning.regions`):

1. Space: a kd node whose subscriptions and located sample messages are textually similar
   (``sim_t >= delta``) or that holds at most ``|S| / P`` subscriptions stays a space node
   (N_s); otherwise it is cut where the candidate costs balance.  A cut that does not change
   ``min(sim_t)`` of the children marks the node text-only (N_t).
2. PartitionNode: while there are fewer than ``leaf_factor * P`` leaves (the paper's theta; at
   most one per 16 subscriptions), the
   leaf of largest load is split in two, by text (term ranges) if it is text-only, else by
   whichever of the space and the text split gives the smaller summed load.  The leaves are
   merged into P partitions (MergeNodesIntoPartitions: by load, descending, into the lightest).
   The paper also stops once ``L_max / L_min <= sigma``; here the tree is always grown to theta
   leaves, so that the local adjustment has cells to move later.
3. The leaf loads are sums of per-leaf estimates, while a partition's load is not additive (its
   summary is a union), so ``calibrate`` rounds of the PS2Stream adjustment run on the sample.

A text-split leaf is a group of ``REPLICATE`` mode: a subscription goes to every group holding one
of its placed terms (PS2Stream's ``T_i``), so replication can exceed 1.  Statistics: per unit
(gridt cell) ``L_g`` from the candidate pairs and query counts, and ``S_g`` (bytes); the
PS2Stream policy (Phase I + GR) moves whole units.  The ComputeNumberPartitions DP is not
implemented (optional in the issue).
"""

from __future__ import annotations

import numpy as np

from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch
from skype.partitioning.agrid import vocabulary_size
from skype.partitioning.base import check_num_partitions, check_thresholds
from skype.partitioning.numberpart import lpt
from skype.partitioning.regions import TERM_END, Leaf, LeafEvaluator, assemble
from skype.partitioning.units import DEFAULT_GRID, REPLICATE, Grid, UnitDistribution, check_grid
from skype.text import Vocabulary


def merged_imbalance(leaves: list[Leaf], num_partitions: int) -> tuple[np.ndarray, float]:
    loads = np.array([leaf.load for leaf in leaves])
    owner = lpt(loads, num_partitions)
    per = np.bincount(owner, weights=loads, minlength=num_partitions)
    return owner, float(per.max() / max(per.min(), 1e-9))


class KdtDistribution(UnitDistribution):
    """PS2Stream's kdt-tree (see module docstring).

    >>> from skype.data import make_workload
    >>> w = make_workload("tweets", num_subs=400, num_messages=800, seed=2)
    >>> d = KdtDistribution.build(8, w.subscriptions, w.messages, w.vocabulary, grid=(32, 16))
    >>> r = d.route_subscriptions(w.subscriptions)
    >>> bool((r.counts() >= 1).all()), d.num_units >= 8
    (True, True)
    """

    name = "kdt"

    @classmethod
    def build(cls, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None = None,
              vocabulary: Vocabulary | None = None, thresholds: np.ndarray | None = None, *,
              grid: tuple[int, int] = DEFAULT_GRID, bounds: Bounds = DEFAULT_BOUNDS, delta: float = 0.9,
              sigma: float = 1.05, leaf_factor: int = 8, calibrate: int = 4) -> KdtDistribution:
        num_partitions = check_num_partitions(num_partitions)
        thresholds = check_thresholds(thresholds, len(subscriptions))
        g = Grid(*check_grid(grid), bounds)
        vocab_size = vocabulary_size(vocabulary, subscriptions, sample)
        ev = LeafEvaluator(g, subscriptions, sample, thresholds, vocab_size, REPLICATE)
        cap = max(1, len(subscriptions) // num_partitions)
        # step 1: space nodes (N_s) and text-only nodes (N_t)
        todo = [ev.evaluate(Leaf((0, 0, g.nx, g.ny), 0, TERM_END))]
        leaves: list[Leaf] = []
        while todo:
            node = todo.pop()
            if node.subs <= cap or ev.text_similarity(node) >= delta or len(leaves) + len(todo) >= num_partitions:
                leaves.append(node)
                continue
            halves = ev.space_split(node)
            if halves is None:
                node.text_only = True
                leaves.append(node)
                continue
            alpha = min(ev.text_similarity(h) for h in halves)
            if abs(alpha - ev.text_similarity(node)) < 1e-6:
                node.text_only = True
                leaves.append(node)
            else:
                todo.extend(halves)
        # step 2: PartitionNode on the heaviest leaf until balanced (or the leaf budget is spent)
        budget = min(leaf_factor * num_partitions, max(num_partitions, len(subscriptions) // 16))
        while len(leaves) < budget:
            open_ = [j for j in range(len(leaves)) if not leaves[j].frozen]
            if not open_:
                break
            i = max(open_, key=lambda j: (leaves[j].load, -j))
            leaf = leaves[i]
            options = []
            text = ev.text_split(leaf)
            if text:
                options.append(text)
            if not leaf.text_only and leaf.lo == 0 and leaf.hi == TERM_END:
                space = ev.space_split(leaf)
                if space:
                    options.append(list(space))
            if not options:
                leaf.frozen = True
                continue
            leaves[i:i + 1] = min(options, key=lambda kids: sum(k.load for k in kids))
        owner, _ = merged_imbalance(leaves, num_partitions)
        tables = assemble(g, leaves, owner.tolist(), REPLICATE)
        dist = cls("kdt", num_partitions, g, *tables, vocab_size)
        dist.route_subscriptions(subscriptions, thresholds)
        dist.pop_new_live_terms()
        if calibrate:
            from skype.partitioning.rebalance import calibrate as refine

            return refine(dist, sample, "ps2stream", calibrate, sigma=sigma, max_fraction=1.0)
        return dist
