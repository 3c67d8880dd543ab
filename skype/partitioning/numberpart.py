"""Multi-way number partitioning: Karmarkar-Karp differencing and the LPT greedy.

Both split items with weights into ``k`` bins with sums as equal as possible (SSTD §3 assigns
QT-tree leaves to workers with Karmarkar-Karp; PS2Stream's MergeNodesIntoPartitions visits nodes
by load, descending, into the lightest partition: LPT).  Both are deterministic: ties go to the
lower index.
"""

from __future__ import annotations

import heapq

import numpy as np


def karmarkar_karp(weights: np.ndarray, k: int) -> np.ndarray:
    """The bin (0..k-1) of every item, by the largest differencing method.

    Each item starts as a k-tuple of bins (its weight in one bin).  The two tuples with the
    largest spread (max - min) are combined, the heaviest bin of one with the lightest of the
    other, until one tuple is left.

    >>> bins = karmarkar_karp(np.array([8.0, 7, 6, 5, 4]), 2)
    >>> sorted(np.bincount(bins, weights=[8.0, 7, 6, 5, 4]).tolist())  # the textbook case: 15/15 exists
    [14.0, 16.0]
    """
    weights = np.asarray(weights, np.float64)
    if len(weights) == 0:
        return np.zeros(0, np.int64)
    heap = []
    for i, w in enumerate(weights):
        sums = [float(w)] + [0.0] * (k - 1)
        sets: list[list[int]] = [[i]] + [[] for _ in range(k - 1)]
        heap.append((-(sums[0] - 0.0), i, sums, sets))
    heapq.heapify(heap)
    counter = len(weights)
    while len(heap) > 1:
        _, _, s1, t1 = heapq.heappop(heap)
        _, _, s2, t2 = heapq.heappop(heap)
        o1 = sorted(range(k), key=lambda j: -s1[j])  # heaviest first
        o2 = sorted(range(k), key=lambda j: s2[j])  # lightest first
        sums = [s1[a] + s2[b] for a, b in zip(o1, o2)]
        sets = [t1[a] + t2[b] for a, b in zip(o1, o2)]
        heapq.heappush(heap, (-(max(sums) - min(sums)), counter, sums, sets))
        counter += 1
    _, _, sums, sets = heap[0]
    order = sorted(range(k), key=lambda j: -sums[j])
    out = np.zeros(len(weights), np.int64)
    for b, j in enumerate(order):
        out[sets[j]] = b
    return out


def lpt(weights: np.ndarray, k: int) -> np.ndarray:
    """Longest processing time first: heaviest item into the currently lightest bin.

    >>> lpt(np.array([5.0, 4, 3, 3]), 2).tolist()
    [0, 1, 1, 0]
    """
    weights = np.asarray(weights, np.float64)
    out = np.zeros(len(weights), np.int64)
    bins = [(0.0, j) for j in range(k)]
    for i in np.argsort(-weights, kind="stable"):
        load, j = heapq.heappop(bins)
        out[i] = j
        heapq.heappush(bins, (load + float(weights[i]), j))
    return out
