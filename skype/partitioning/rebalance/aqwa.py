"""AQWA's repartitioning (Aly et al. §3.5-3.6): paired split and merge on the kd-tree, time fading.

P stays constant: a leaf is split only together with a merge of two sibling leaves, which frees
the partition the split needs.  The two priority queues:

* **split queue** (max): per leaf p, its best cut (the line balancing its replicas, from the
  prefix grid) and the gain ``C_d(p) = cost(p) - max(cost(p1), cost(p2))``;
* **merge queue** (min): per inner node whose two children are leaves, the merged cost
  ``cost(m1) + cost(m2)``.

Eq. 6 here: split p_s and merge (m1, m2) iff the largest of the three new partitions stays below
``cost(p_s)`` by more than the read/write cost ``C_rw = beta * per_replica * (N(p2) + N(m2))``
(the replicas that change partition).  AQWA minimises total work; a pub/sub stage waits for its
slowest partition, so gain and loss are taken on the maximum (the digest's caveat).  Pairs are
taken while the test holds, up to ``max_ops``, while the imbalance is above ``trigger``.

**Time fading** (§3.6) is the statistics' own: the caller folds them with ``decay = 1/c``
(``FADING["aqwa"]``, c = 2) at every interval, so old counts halve and a past hot spot stops
holding its partitions.  ``cost_estimate`` is the summed ``C_rw``.
"""

from __future__ import annotations

import copy


from skype.partitioning.rebalance.base import LoadModel, Plan, empty_plan
from skype.partitioning.rects import KDTree, best_cut, prefix_grid, rect_cells, rect_sum, split_rect


def decide(snapshot: dict, *, trigger: float = 1.1, beta: float = 0.2, max_ops: int = 16,
           horizon: float = 0.0, measured: bool = False) -> Plan:
    model = LoadModel(snapshot, horizon, measured)
    before = model.imbalance()
    tree: KDTree = copy.deepcopy(snapshot["tree"])
    if before <= trigger:
        return empty_plan("aqwa", before)
    nx, ny = snapshot["grid"]
    S = prefix_grid(model.subs, nx, ny)
    per_replica = model.loads.sum() / max(model.subs.sum(), 1.0)
    ops: list[tuple[int, int, int, int]] = []
    cost_total = 0.0
    for _ in range(max_ops):
        if model.imbalance() <= trigger:
            break
        rate, loads = model.rate, model.loads
        leaf_of = tree.leaf_of_part()
        splits = []
        for part, leaf in leaf_of.items():
            cut = best_cut(S, tree.rect[leaf])
            if cut is None:
                continue
            a, b = split_rect(tree.rect[leaf], cut[0], cut[1])
            splits.append((loads[part] - max(rect_sum(S, a), rect_sum(S, b)) * rate[part], leaf, part, cut, b))
        merges = []
        for node in tree.sibling_leaf_pairs():
            kids = tree.children[node]
            assert kids is not None
            p1, p2 = tree.part[kids[0]], tree.part[kids[1]]
            merged = loads[p1] + rect_sum(S, tree.rect[kids[1]]) * rate[p1]
            merges.append((merged, node, p1, p2, kids[1]))
        if not splits or not merges:
            break
        splits.sort(key=lambda s: -s[0])
        merges.sort(key=lambda m: m[0])
        done = False
        for gain, leaf, part, cut, right in splits[:4]:
            for merged, node, p1, p2, kid2 in merges:
                if leaf in (tree.children[node] or ()):
                    continue
                n_right = rect_sum(S, right)
                left_cost = loads[part] - n_right * rate[part]
                new_max = max(left_cost, n_right * rate[p2], merged)
                c_rw = beta * per_replica * (n_right + rect_sum(S, tree.rect[kid2]))
                if loads[part] - new_max > c_rw:
                    model.move(rect_cells(tree.rect[kid2], nx), p1)
                    model.move(rect_cells(right, nx), p2)
                    tree.merge(node, p1)
                    tree.split(leaf, cut[0], cut[1], p2)
                    ops.append((leaf, cut[0], cut[1], node))
                    model.operations.append(f"split leaf of {part}, merge {p2} into {p1}")
                    cost_total += c_rw
                    done = True
                break
            if done:
                break
        if not done:
            break
    plan = model.plan("aqwa", before, cost_total, structure=tuple(ops) if ops else None)
    return plan if plan.imbalance_after < before else empty_plan("aqwa", before)
