"""Rectangles of grid cells: O(1) sums from a 2-D prefix grid, and balancing cut lines.

A rectangle is ``(x0, y0, x1, y1)`` in cell indices, half-open (``x0 <= ix < x1``).  The prefix
grid ``S`` has shape ``(ny + 1, nx + 1)`` with ``S[y, x]`` the sum of the cells below row y and left
of column x, so a rectangle's sum is four lookups (AQWA §3.2, Eq. 2, with index -1 read as 0).
Used to build A-Grid and AQWA partitions and by the rebalancing policies that cut rectangles;
:class:`KDTree` is AQWA's tree of such rectangles (its builder and its rebalancing policy share it).
"""

from __future__ import annotations

import heapq

import numpy as np

Rect = tuple[int, int, int, int]


def prefix_grid(values: np.ndarray, nx: int, ny: int) -> np.ndarray:
    """2-D inclusive prefix sums of per-cell values (cell id = iy * nx + ix), zero-padded.

    >>> S = prefix_grid(np.arange(6.0), 3, 2)
    >>> rect_sum(S, (0, 0, 3, 2)), rect_sum(S, (1, 1, 3, 2))
    (15.0, 9.0)
    """
    out = np.zeros((ny + 1, nx + 1))
    out[1:, 1:] = np.asarray(values, np.float64).reshape(ny, nx).cumsum(axis=0).cumsum(axis=1)
    return out


def rect_sum(S: np.ndarray, rect: Rect) -> float:
    x0, y0, x1, y1 = rect
    return float(S[y1, x1] - S[y0, x1] - S[y1, x0] + S[y0, x0])


def rect_cells(rect: Rect, nx: int) -> np.ndarray:
    """Cell ids of a rectangle."""
    x0, y0, x1, y1 = rect
    xs, ys = np.meshgrid(np.arange(x0, x1), np.arange(y0, y1))
    return (ys * nx + xs).ravel().astype(np.int64)


def cut_candidates(S: np.ndarray, rect: Rect) -> list[tuple[int, int, float, float]]:
    """Every cut of ``rect`` as ``(axis, line, sum below/left, sum above/right)``, axis 0 = x."""
    x0, y0, x1, y1 = rect
    out = []
    xs = np.arange(x0 + 1, x1)
    if len(xs):
        left = S[y1, xs] - S[y0, xs] - S[y1, x0] + S[y0, x0]
        total = rect_sum(S, rect)
        out += [(0, int(c), float(a), float(total - a)) for c, a in zip(xs, left)]
    ys = np.arange(y0 + 1, y1)
    if len(ys):
        low = S[ys, x1] - S[ys, x0] - S[y0, x1] + S[y0, x0]
        total = rect_sum(S, rect)
        out += [(1, int(c), float(a), float(total - a)) for c, a in zip(ys, low)]
    return out


def best_cut(S: np.ndarray, rect: Rect, tie: np.ndarray | None = None) -> tuple[int, int, float, float] | None:
    """The cut minimising the larger half's sum (Tornado §4.1, AQWA §3.4); ties go to the cut
    balancing ``tie`` (another prefix grid, e.g. subscription counts), then to the middle.
    None when the rectangle is one cell."""
    x0, y0, x1, y1 = rect
    best, best_key = None, None
    for axis, line, a, b in cut_candidates(S, rect):
        lo, hi = (x0, x1) if axis == 0 else (y0, y1)
        key: tuple[float, ...] = (max(a, b),)
        if tie is not None:
            sub = (x0, y0, line, y1) if axis == 0 else (x0, y0, x1, line)
            ta = rect_sum(tie, sub)
            key += (abs(2 * ta - rect_sum(tie, rect)),)
        key += (abs(line - (lo + hi) / 2) / max(hi - lo, 1),)
        if best_key is None or key < best_key:
            best, best_key = (axis, line, a, b), key
    return best


def split_rect(rect: Rect, axis: int, line: int) -> tuple[Rect, Rect]:
    x0, y0, x1, y1 = rect
    if axis == 0:
        return (x0, y0, line, y1), (line, y0, x1, y1)
    return (x0, y0, x1, line), (x0, line, x1, y1)


def greedy_kd(S: np.ndarray, full: Rect, parts: int, tie: np.ndarray | None = None) -> list[Rect]:
    """Tornado's initial partitioning (§4.1): pop the costliest rectangle, cut it minimising the
    larger half, until ``parts`` rectangles (or no rectangle can be cut; empty ones pad the list).

    >>> S = prefix_grid(np.array([4.0, 1, 1, 1, 1, 0, 0, 0]), 4, 2)
    >>> greedy_kd(S, (0, 0, 4, 2), 2)
    [(0, 0, 1, 2), (1, 0, 4, 2)]
    """
    heap = [(-rect_sum(S, full), 0, full)]
    done: list[Rect] = []
    counter = 1
    while heap and len(heap) + len(done) < parts:
        _, _, rect = heapq.heappop(heap)
        cut = best_cut(S, rect, tie)
        if cut is None:
            done.append(rect)
            continue
        for half in split_rect(rect, cut[0], cut[1]):
            heapq.heappush(heap, (-rect_sum(S, half), counter, half))
            counter += 1
    rects = done + [r for _, _, r in heap]
    rects.sort(key=lambda r: (r[1], r[0]))
    return rects + [(0, 0, 0, 0)] * (parts - len(rects))


class KDTree:
    """Nodes with a cell rectangle; a leaf carries its partition (``part``), an inner node -1."""

    def __init__(self, full: Rect) -> None:
        self.rect: list[Rect] = [full]
        self.parent: list[int] = [-1]
        self.children: list[tuple[int, int] | None] = [None]
        self.part: list[int] = [0]

    def leaves(self) -> list[int]:
        return [n for n, c in enumerate(self.children) if c is None and self.part[n] >= 0]

    def leaf_of_part(self) -> dict[int, int]:
        return {self.part[n]: n for n in self.leaves()}

    def split(self, node: int, axis: int, line: int, right_part: int) -> tuple[int, int]:
        """Cut a leaf; the left child keeps its partition, the right child gets ``right_part``."""
        left_rect, right_rect = split_rect(self.rect[node], axis, line)
        kids = []
        for rect, part in ((left_rect, self.part[node]), (right_rect, right_part)):
            self.rect.append(rect)
            self.parent.append(node)
            self.children.append(None)
            self.part.append(part)
            kids.append(len(self.rect) - 1)
        self.children[node] = (kids[0], kids[1])
        self.part[node] = -1
        return kids[0], kids[1]

    def merge(self, node: int, part: int) -> None:
        """Make an inner node whose two children are leaves a leaf owned by ``part``."""
        kids = self.children[node]
        assert kids is not None
        for k in kids:
            self.part[k] = -2  # detached
        self.children[node] = None
        self.part[node] = part

    def sibling_leaf_pairs(self) -> list[int]:
        """Inner nodes whose two children are both leaves (AQWA's merge candidates)."""
        out = []
        for n, kids in enumerate(self.children):
            if kids is not None and all(self.children[k] is None and self.part[k] >= 0 for k in kids):
                out.append(n)
        return out
