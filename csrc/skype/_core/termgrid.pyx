# cython: language_level=3
"""Shared per-cell term counts for the ``terms`` kind (issue 26, design 2).

A uniform ``cells x cells`` grid over the engine's bounds.  Every term held by at least
``create_at`` window messages has a table of 2D prefix sums of its per-cell counts:
``table[(y + 1) * side + x + 1]`` = the window messages holding the term in cells ``<= (x, y)``
(row 0 and column 0 are zeros).  Invariant: a table counts exactly the messages of the query
window's tree of its term, whose count is read from that tree's root (the grid keeps no counts
of its own).  A message moves the tables of its terms by one (``(cells - x) * (cells - y)``
entries each); a table is built from the term's tree when its count reaches ``create_at`` and
dropped when the count falls below ``drop_below``.

The count of a term in the cells a rectangle meets (four reads) bounds its count in the
rectangle from above: the cell of a coordinate is monotone in it, so every message inside the
rectangle lies in a cell between the cells of the rectangle's corners.  The ``terms``
subscriptions share these counts: an arriving term outside a subscription's buffer whose
bound ranks after the buffer's last entry needs no walk of its tree.  Memory: ``4 * side^2``
bytes per table (16.9 KB at 64 cells), at most one per term with ``drop_below`` or more window
messages.  ``term_of`` and ``count_of`` list the tables' terms and their window counts densely
(the snapshot ``terms`` query visits terms in decreasing window count from them).
"""
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t
from skype._core.types cimport term_t, RectC, MsgTermC
from skype._core.window cimport MsgC, win_get
from skype._core.msgindex cimport MEntryC
from skype._core.querywindow cimport QueryWindow
from skype._core.cells cimport cell_of


cdef class TermGrid:
    def __cinit__(self, QueryWindow qw, double minx, double miny, double maxx, double maxy, uint32_t cells=64,
                  uint32_t create_at=32, uint32_t drop_below=16):
        cdef term_t t
        self.qw = qw
        self.minx = minx
        self.miny = miny
        self.cells = max(cells, 1)
        self.side = self.cells + 1
        self.scale_x = self.cells / (maxx - minx) if maxx > minx else 0.0
        self.scale_y = self.cells / (maxy - miny) if maxy > miny else 0.0
        self.create_at = max(create_at, 1)
        self.drop_below = min(drop_below, self.create_at)
        qw.c_need_term_trees()
        self.table_of.resize(qw.index.root.size(), -1)
        for t in range(1, qw.index.root.size()):          # the frequent terms of the window now
            if qw.index.root[t] >= 0 and qw.index.nodes[qw.index.root[t]].count >= self.create_at:
                self._build(t)

    cdef uint32_t cell_x(self, double x) noexcept nogil:
        return cell_of((x - self.minx) * self.scale_x, self.cells)

    cdef uint32_t cell_y(self, double y) noexcept nogil:
        return cell_of((y - self.miny) * self.scale_y, self.cells)

    cdef CellRangeC c_cells(self, const RectC* r) noexcept nogil:
        return CellRangeC(self.cell_x(r.minx), self.cell_y(r.miny), self.cell_x(r.maxx), self.cell_y(r.maxy))

    cdef void _add(self, vector[uint32_t]* tab, uint32_t cx, uint32_t cy, uint32_t delta) noexcept nogil:
        """Every prefix entry at or after cell (cx, cy) in both axes moves by delta (mod 2^32)."""
        cdef uint32_t yy, xx
        cdef uint32_t* row
        for yy in range(cy + 1, self.side):
            row = tab.data() + <size_t>yy * self.side
            for xx in range(cx + 1, self.side):
                row[xx] += delta

    cdef void _build(self, term_t t) noexcept nogil:
        """The term's table from its tree (every window message holding it)."""
        cdef vector[int32_t] stack
        cdef vector[uint32_t]* tab
        cdef vector[MEntryC]* leaf
        cdef int32_t n, slot
        cdef uint32_t q, x, y
        cdef size_t e
        cdef MsgC* m
        if self.free_tables.size():
            slot = self.free_tables.back()
            self.free_tables.pop_back()
        else:
            slot = <int32_t>self.tables.size()
            self.tables.resize(slot + 1)
            self.term_of.resize(slot + 1, 0)
            self.count_of.resize(slot + 1, 0)
        tab = &self.tables[slot]
        tab.assign(<size_t>self.side * self.side, 0)
        stack.push_back(self.qw.index.root[t])
        while stack.size():                      # per-cell counts first
            n = stack.back()
            stack.pop_back()
            if self.qw.index.nodes[n].child >= 0:
                for q in range(4):
                    if self.qw.index.nodes[self.qw.index.nodes[n].child + q].count:
                        stack.push_back(self.qw.index.nodes[n].child + q)
                continue
            leaf = &self.qw.index.entries[n]
            for e in range(leaf.size()):
                m = win_get(self.qw.window, leaf[0][e].seq)
                tab[0][<size_t>(self.cell_y(m.y) + 1) * self.side + self.cell_x(m.x) + 1] += 1
        for y in range(1, self.side):            # then prefix sums along x, then along y
            for x in range(1, self.side):
                tab[0][<size_t>y * self.side + x] += tab[0][<size_t>y * self.side + x - 1]
        for y in range(2, self.side):
            for x in range(1, self.side):
                tab[0][<size_t>y * self.side + x] += tab[0][<size_t>(y - 1) * self.side + x]
        if t >= self.table_of.size():
            self.table_of.resize(t + 1, -1)
        self.table_of[t] = slot
        self.term_of[slot] = t
        self.count_of[slot] = self.qw.index.nodes[self.qw.index.root[t]].count
        self.built += 1

    cdef void c_message(self, double x, double y, const MsgTermC* mt, uint32_t nterms, int delta) noexcept nogil:
        """A message arrives (+1: it is in the trees already) or expires (-1: still in them)."""
        cdef uint32_t ti, cx = self.cell_x(x), cy = self.cell_y(y), count
        cdef term_t t
        cdef int32_t slot
        for ti in range(1, nterms):
            t = mt[ti].term
            slot = self.table_of[t] if t < self.table_of.size() else -1
            count = self.qw.index.nodes[self.qw.index.root[t]].count     # this message included
            if slot >= 0:
                if delta < 0 and count - 1 < self.drop_below:
                    self.table_of[t] = -1
                    self.term_of[slot] = 0
                    self.count_of[slot] = 0
                    self.tables[slot].clear()
                    self.tables[slot].shrink_to_fit()
                    self.free_tables.push_back(slot)
                    self.dropped += 1
                else:
                    self._add(&self.tables[slot], cx, cy, <uint32_t>delta)
                    self.count_of[slot] = count - 1 if delta < 0 else count
            elif delta > 0 and count >= self.create_at:
                self._build(t)

    cdef bint c_upper(self, term_t t, const CellRangeC* c, uint32_t* count) noexcept nogil:
        """The term's count over the cells ``c`` (>= its count in a rectangle meeting only these
        cells); False when the term has no table."""
        cdef int32_t slot = self.table_of[t] if t < self.table_of.size() else -1
        cdef const uint32_t* tab
        cdef size_t lo, hi
        if slot < 0:
            return False
        tab = self.tables[slot].data()
        lo = <size_t>c.y0 * self.side
        hi = <size_t>(c.y1 + 1) * self.side
        count[0] = tab[hi + c.x1 + 1] - tab[lo + c.x1 + 1] - tab[hi + c.x0] + tab[lo + c.x0]
        return True

    def stats(self):
        return {"cells": self.cells, "tables": self.tables.size() - self.free_tables.size(),
                "tables_built": self.built, "tables_dropped": self.dropped,
                "bytes": (self.tables.size() - self.free_tables.size()) * self.side * self.side * 4}
