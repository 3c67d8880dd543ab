"""Space-and-text leaves for the tree methods (``kdt``, ``qt``): evaluation and splitting at build time.

A leaf is a rectangle of grid cells and a term-id range ``[lo, hi)``.  Which subscriptions it
holds depends on the text mode (see :mod:`skype.partitioning.units`):

* ``REPLICATE`` (PS2Stream's kdt-tree): every subscription of the rectangle with a placed
  loose-prefix term in the range, and only those terms enter the leaf's summary;
* ``SINGLE`` (SSTD's QT-tree): every subscription of the rectangle whose *first* placed term lies
  in the range, with all its placed terms in the summary.

Its load is the pair count of the layer's measure, ``W = |S_leaf| * |M_leaf|``, with ``M_leaf``
the sample messages sharing a term with the leaf's summary: a spatial split keeps the children's
summaries overlapping (the same terms occur everywhere), a textual split separates them, so the
two kinds of split really differ in cost (PS2Stream Fig. 2, SSTD Eq. 2).

:func:`assemble` turns the final leaves into the unit tables: leaves with the same rectangle
form one region whose groups are their term ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from skype.model import MessageBatch, SubscriptionBatch
from skype.partitioning.prefix import entry_rows, loose_prefix_lengths, prefix_mask
from skype.partitioning.rects import Rect, best_cut, prefix_grid, split_rect
from skype.partitioning.units import _KEY, REPLICATE, Grid

TERM_END = int(_KEY) - 1  # the open end of the last term range


@dataclass
class Leaf:
    rect: Rect
    lo: int  # term range [lo, hi)
    hi: int
    load: float = 0.0
    subs: int = 0
    text_only: bool = False  # PS2Stream's N_t: space splits do not help
    frozen: bool = False  # no split of it is possible


class LeafEvaluator:
    """The sample and the placed subscription entries, to evaluate leaves quickly."""

    def __init__(self, grid: Grid, subs: SubscriptionBatch, sample: MessageBatch | None,
                 thresholds: np.ndarray | None, vocab_size: int, mode: int) -> None:
        self.grid, self.mode = grid, mode
        lengths = loose_prefix_lengths(subs.terms, subs.alpha, thresholds)
        held = prefix_mask(subs.terms, lengths)
        self.rows = entry_rows(subs.terms)[held]
        self.terms = subs.terms.ids[held]
        first = np.full(len(subs), -1, np.int64)
        if len(self.rows):
            starts = np.r_[True, self.rows[1:] != self.rows[:-1]]
            first[self.rows[starts]] = self.terms[starts]
        self.first = first
        cells = grid.cell_of(subs.x, subs.y)
        self.ix, self.iy = cells % grid.nx, cells // grid.nx
        self.n_subs = len(subs)
        self.vocab = max(vocab_size, int(self.terms.max(initial=0)) + 1)
        if sample is not None and len(sample):
            self.m_rows, self.m_terms = entry_rows(sample.terms), sample.terms.ids
            keep = self.m_terms < self.vocab
            self.m_rows, self.m_terms = self.m_rows[keep], self.m_terms[keep]
            self.freq = np.bincount(self.m_terms, minlength=self.vocab).astype(np.float64)
            self.n_msgs = len(sample)
        else:
            self.m_rows = self.m_terms = np.zeros(0, np.int64)
            self.freq = np.zeros(self.vocab)
            self.n_msgs = 0

    def _in_rect(self, rect: Rect, ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
        x0, y0, x1, y1 = rect
        return (ix >= x0) & (ix < x1) & (iy >= y0) & (iy < y1)

    def entries(self, leaf: Leaf) -> tuple[np.ndarray, np.ndarray]:
        """(sub rows, summary terms) of the leaf's placed entries."""
        inside = self._in_rect(leaf.rect, self.ix[self.rows], self.iy[self.rows])
        if self.mode == REPLICATE:
            key = self.terms
        else:
            key = self.first[self.rows]
        sel = inside & (key >= leaf.lo) & (key < leaf.hi)
        return self.rows[sel], self.terms[sel]

    def evaluate(self, leaf: Leaf) -> Leaf:
        rows, terms = self.entries(leaf)
        leaf.subs = len(np.unique(rows))
        if self.n_msgs and len(terms):
            live = np.zeros(self.vocab, bool)
            live[terms] = True
            met = np.unique(self.m_rows[live[self.m_terms]])
            leaf.load = float(leaf.subs) * len(met) + leaf.subs
        else:
            leaf.load = float(leaf.subs)
        return leaf

    def space_split(self, leaf: Leaf) -> tuple[Leaf, Leaf] | None:
        """Cut the rectangle where the subscriptions' candidate costs balance."""
        rows, terms = self.entries(leaf)
        if len(rows) == 0:
            return None
        cost = np.bincount(rows, weights=self.freq[terms] + 1.0, minlength=self.n_subs)
        cells = self.iy * self.grid.nx + self.ix
        S = prefix_grid(np.bincount(cells, weights=cost, minlength=self.grid.num_cells), self.grid.nx, self.grid.ny)
        cut = best_cut(S, leaf.rect)
        if cut is None:
            return None
        a, b = split_rect(leaf.rect, cut[0], cut[1])
        return self.evaluate(Leaf(a, leaf.lo, leaf.hi)), self.evaluate(Leaf(b, leaf.lo, leaf.hi))

    def text_split(self, leaf: Leaf, parts: int = 2) -> list[Leaf] | None:
        """Cut the term range into ``parts`` ranges of about equal candidate cost."""
        rows, terms = self.entries(leaf)
        key = terms if self.mode == REPLICATE else self.first[rows]
        uniq, inverse = np.unique(key, return_inverse=True)
        if len(uniq) < 2:
            return None
        w = np.bincount(inverse, weights=self.freq[terms] + 1.0, minlength=len(uniq))
        cum = np.cumsum(w) / w.sum()
        cuts = sorted({int(uniq[min(max(int(np.searchsorted(cum, q)), 0) + 1, len(uniq) - 1)])
                       for q in np.arange(1, parts) / parts})
        bounds = [leaf.lo] + cuts + [leaf.hi]
        return [self.evaluate(Leaf(leaf.rect, a, b, text_only=True)) for a, b in zip(bounds[:-1], bounds[1:]) if a < b]

    def text_similarity(self, leaf: Leaf) -> float:
        """PS2Stream's sim_t: cosine of the term-frequency vectors of the leaf's messages (by
        location) and subscriptions."""
        rows, terms = self.entries(leaf)
        if len(terms) == 0 or self.n_msgs == 0:
            return 0.0
        q = np.bincount(terms, minlength=self.vocab).astype(np.float64)
        return float(q @ self.freq / (np.linalg.norm(q) * np.linalg.norm(self.freq) + 1e-300))


def assemble(grid: Grid, leaves: list[Leaf], owner_of_leaf: list[int],
             mode: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unit tables from the leaves: (cell_region, region_groups, region_mode, cut_keys, owner)."""
    by_rect: dict[Rect, list[int]] = {}
    for i, leaf in enumerate(leaves):
        by_rect.setdefault(leaf.rect, []).append(i)
    cell_region = np.zeros(grid.num_cells, np.int64)
    groups, cut_keys, owner = [], [], []
    for r, (rect, idx) in enumerate(by_rect.items()):
        x0, y0, x1, y1 = rect
        view = cell_region.reshape(grid.ny, grid.nx)
        view[y0:y1, x0:x1] = r
        idx.sort(key=lambda i: leaves[i].lo)
        groups.append(len(idx))
        cut_keys += [r * int(_KEY) + leaves[i].lo for i in idx[1:]]
        owner += [owner_of_leaf[i] for i in idx]
    return (cell_region, np.array(groups, np.int64), np.full(len(groups), mode, np.int8),
            np.array(cut_keys, np.int64), np.array(owner, np.int32))
