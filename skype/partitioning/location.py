"""Location distribution (spec §5.2, Eq. 15, Algorithm 3): a cost-based KD split of space.

Build (Algorithm 3, ``CostKD(n, depth, P)``): a node holding ``P > 1`` partitions is cut on the
x axis at even depths and the y axis at odd depths into a left child with ``P_L = floor(P/2)``
partitions and a right child with ``P_R = P - P_L``.  Among all cuts of the node's points sorted
along the axis, the cut minimises

    | Cost(n_L) / P_L - Cost(n_R) / P_R |,    Cost(n) = |S_n| * P_n           (Eq. 15)

with ``|S_n|`` the subscriptions in n and ``P_n`` the fraction of sample messages in n.  Ties
(e.g. no sample message in the node, so every cost is 0) go to the cut that best balances the
subscription counts, then to the cut nearest the proportional position.  Unlike a median split,
the cut balances the cost, not the counts [P].  The leaves, exactly P of them, are the partitions.

**Points on a cut line.**  Points are ordered by the key ``(coordinate, splitmix64(id))``, and
a cut is a key: a point goes left iff its key is smaller.  So the split of subscriptions that
share a coordinate (in the extreme, all at one point) is still a pure function of the record,
and such subscriptions are spread over the leaves by their id hash instead of piling up.

Routing: a subscription descends the tree (one vectorised step per level, depth
``ceil(log2 P)``) to exactly one leaf: replication 1.  Every message goes to every partition
(communication P, Table 2): any subscription anywhere may rank any message, so meeting is
trivial.  The cost model assumes the engine prunes far messages cheaply (cell pruning, Lemma 6);
the simulator's load measure does not model that (see ``docs/distribution.md``).
"""

from __future__ import annotations

import numpy as np

from skype.partitioning.base import Distribution, check_num_partitions, check_thresholds
from skype.partitioning.routing import Routing, splitmix64
from skype.model import Bounds, DEFAULT_BOUNDS, MessageBatch, SubscriptionBatch

_ALL_LEFT = (np.inf, np.uint64(np.iinfo(np.uint64).max))


def _goes_left(c: np.ndarray, u: np.ndarray, key_c: float | np.ndarray, key_u: int | np.integer | np.ndarray) -> np.ndarray:
    """Which points go left of the cut (key_c, key_u): scalars, or one cut per point."""
    return (c < key_c) | ((c == key_c) & (u < key_u))


def best_cut(c: np.ndarray, u: np.ndarray, is_sub: np.ndarray, p_left: int, p_right: int) -> tuple[float, np.uint64]:
    """The key ``(coordinate, tie)`` of the cost-balancing cut of one node (Algorithm 3, line 4).

    ``c``/``u``/``is_sub`` describe the node's points (subscriptions and sample messages).
    Points with a key below the returned one go left.

    >>> u = np.arange(6, dtype=np.uint64); is_sub = np.array([1, 1, 1, 1, 0, 0], bool)
    >>> best_cut(np.array([0., 1., 2., 3., 0.5, 2.5]), u, is_sub, 1, 1)  # 2 subs + 1 message a side
    (2.0, np.uint64(2))
    >>> best_cut(np.array([0., 1., 2., 3., 10., 11.]), u, is_sub, 1, 1)  # no message near the subs:
    (10.0, np.uint64(4))

    In the second case every subscription lies where no sample message falls, so both sides cost 0
    when all of them go left: Eq. 15 takes subscriptions without nearby messages as free.
    """
    n = len(c)
    if n < 2:
        return _ALL_LEFT
    order = np.lexsort((u, c))
    c, u, is_sub = c[order], u[order], is_sub[order]
    valid = np.flatnonzero((c[1:] != c[:-1]) | (u[1:] != u[:-1]))  # cut after j: key[j] < key[j+1]
    if len(valid) == 0:
        return _ALL_LEFT
    subs_left = np.cumsum(is_sub)[:-1].astype(np.float64)[valid]
    msgs_left = np.cumsum(~is_sub)[:-1].astype(np.float64)[valid]
    total_s, total_m = float(is_sub.sum()), float(n - is_sub.sum())
    cost_l = subs_left * msgs_left
    cost_r = (total_s - subs_left) * (total_m - msgs_left)
    objective = np.abs(cost_l / p_left - cost_r / p_right)
    sub_balance = np.abs(subs_left / p_left - (total_s - subs_left) / p_right)
    position = np.abs((valid + 1) / n - p_left / (p_left + p_right))
    j = valid[np.lexsort((position, sub_balance, objective))[0]]
    return float(c[j + 1]), u[j + 1]


class LocationDistribution(Distribution):
    """Algorithm 3 (see module docstring).

    >>> from skype.data import make_workload
    >>> w = make_workload("geonames", num_subs=400, num_messages=400, seed=2)
    >>> d = LocationDistribution.build(8, w.subscriptions, w.messages)
    >>> sizes = d.route_subscriptions(w.subscriptions).partition_sizes(8)
    >>> int(sizes.sum()), len(sizes)
    (400, 8)
    """

    name = "location"
    broadcasts_messages = True

    def __init__(self, num_partitions: int, axis: np.ndarray, key_c: np.ndarray, key_u: np.ndarray,
                 left: np.ndarray, right: np.ndarray, leaf: np.ndarray, rects: np.ndarray) -> None:
        self.num_partitions = check_num_partitions(num_partitions)
        self.axis = axis  # int8 per node: 0 = x, 1 = y (leaves: -1)
        self.key_c = key_c  # float64 per node: cut coordinate
        self.key_u = key_u  # uint64 per node: cut tie-break
        self.left = left  # int32 per node: child ids (leaves: -1)
        self.right = right
        self.leaf = leaf  # int32 per node: partition id of a leaf, -1 for internal nodes
        self.rects = rects  # float64 (P, 4): each partition's region minx, miny, maxx, maxy
        self.depth = int(np.ceil(np.log2(num_partitions))) if num_partitions > 1 else 0

    @classmethod
    def build(cls, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None = None,
              vocabulary=None, thresholds=None, *, bounds: Bounds = DEFAULT_BOUNDS) -> LocationDistribution:
        num_partitions = check_num_partitions(num_partitions)
        s_x, s_y, s_u = subscriptions.x, subscriptions.y, splitmix64(subscriptions.ids)
        if sample is not None and len(sample):
            m_x, m_y, m_u = sample.x, sample.y, splitmix64(sample.ids)
        else:
            m_x = m_y = np.zeros(0)
            m_u = np.zeros(0, np.uint64)
        nodes: dict[str, list] = {k: [] for k in ("axis", "key_c", "key_u", "left", "right", "leaf")}
        rects = np.zeros((num_partitions, 4))

        def new_node() -> int:
            for k, default in (("axis", -1), ("key_c", 0.0), ("key_u", 0), ("left", -1), ("right", -1), ("leaf", -1)):
                nodes[k].append(default)
            return len(nodes["leaf"]) - 1

        def cost_kd(s_idx: np.ndarray, m_idx: np.ndarray, depth: int, parts: int, first_leaf: int, rect) -> int:
            node = new_node()
            if parts == 1:  # line 1
                nodes["leaf"][node] = first_leaf
                rects[first_leaf] = rect
                return node
            axis = depth % 2  # line 2
            p_left = parts // 2  # line 3
            p_right = parts - p_left
            sc, mc = (s_x, m_x) if axis == 0 else (s_y, m_y)
            c = np.concatenate([sc[s_idx], mc[m_idx]])
            u = np.concatenate([s_u[s_idx], m_u[m_idx]])
            is_sub = np.r_[np.ones(len(s_idx), bool), np.zeros(len(m_idx), bool)]
            key_c, key_u = best_cut(c, u, is_sub, p_left, p_right)  # line 4
            s_left = _goes_left(sc[s_idx], s_u[s_idx], key_c, key_u)  # line 5
            m_left = _goes_left(mc[m_idx], m_u[m_idx], key_c, key_u)
            cut = min(max(key_c, rect[axis]), rect[axis + 2])
            rect_l, rect_r = list(rect), list(rect)
            rect_l[axis + 2], rect_r[axis] = cut, cut
            nodes["axis"][node], nodes["key_c"][node], nodes["key_u"][node] = axis, key_c, int(key_u)
            nodes["left"][node] = cost_kd(s_idx[s_left], m_idx[m_left], depth + 1, p_left, first_leaf, rect_l)  # line 6
            nodes["right"][node] = cost_kd(s_idx[~s_left], m_idx[~m_left], depth + 1, p_right,  # line 7
                                           first_leaf + p_left, rect_r)
            return node

        cost_kd(np.arange(len(subscriptions), dtype=np.int64), np.arange(len(m_x), dtype=np.int64), 0,
                num_partitions, 0, list(bounds.as_tuple()))
        return cls(num_partitions, np.array(nodes["axis"], np.int8), np.array(nodes["key_c"], np.float64),
                   np.array(nodes["key_u"], np.uint64), np.array(nodes["left"], np.int32),
                   np.array(nodes["right"], np.int32), np.array(nodes["leaf"], np.int32), rects)

    def leaf_of(self, ids: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The partition (leaf) of each point, by descending the tree level by level."""
        node = np.zeros(len(ids), dtype=np.int32)
        u = splitmix64(ids)
        for _ in range(self.depth):
            todo = np.flatnonzero(self.leaf[node] < 0)
            if len(todo) == 0:
                break
            nd = node[todo]
            c = np.where(self.axis[nd] == 0, x[todo], y[todo])
            go_left = _goes_left(c, u[todo], self.key_c[nd], self.key_u[nd])
            node[todo] = np.where(go_left, self.left[nd], self.right[nd])
        return self.leaf[node]

    def route_subscriptions(self, batch: SubscriptionBatch, thresholds: np.ndarray | None = None) -> Routing:
        check_thresholds(thresholds, len(batch))
        return Routing.one_each(self.leaf_of(batch.ids, batch.x, batch.y))

    def route_messages(self, batch: MessageBatch) -> Routing:
        return Routing.broadcast(len(batch), self.num_partitions)

    def describe(self) -> dict:
        return {**super().describe(), "depth": self.depth, "regions": self.rects.round(4).tolist()}
