# cython: language_level=3
"""Rectangle subscriptions (``range`` and ``terms`` kinds): which of them does a point with
these terms match, without scanning them all.

Layout (PS2Stream's GI2: a uniform grid with per-term lists).  The space is cut into
``grid x grid`` cells.  A subscription is posted once per cell its rectangle meets, in the list
of each of its *cover* terms (every message satisfying its predicate holds one of them: all
terms of ``any``, the rarest of ``all``, per expression as ``skype.queries`` derives it; term 0,
held by every message, when it has no predicate).  A term's list is an array of (cell, slot)
postings kept sorted (appends mark it dirty; it is re-sorted at the next probe), so the
postings of one cell are a contiguous run found by binary search, or, in lists of at least
``DIRECTORY_MIN`` postings, read from a directory of run starts per cell (a binary search over
a long list costs a cache miss per step).

Probe of a message at (x, y) with terms T: for each t in T (term 0 included), the run of
cell(x, y) in t's list; each subscription reached is checked exactly: rectangle (edges
included), then its predicate.  A probe stamp reports each subscription once.  Two posting
flags skip the checks where they cannot fail: ``POST_INSIDE`` (a cell strictly between the
rectangle's first and last cells in both axes: cells are monotone, so all its points are
inside) and ``POST_IMPLIED`` (a predicate without AND, whose cover is all its terms, holds for
any message holding the list's term).

Invariants: every live subscription has exactly one posting per (cover term, cell its
rectangle meets); cells are monotone in the coordinates, so a point inside a rectangle lies in
one of the rectangle's cells.  Nothing is stored per (subscription, message).
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.stdint cimport int64_t, uint32_t
from skype._core.types cimport term_t, RectC, MsgTermC, prefetch, PREFETCH_AHEAD
from skype._core.predicate cimport eval_program


cdef enum:
    DIRECTORY_MIN = 4096                # lists at least this long get a cell directory


cdef bint post_before(const PostC& a, const PostC& b) noexcept nogil:
    return a.cell < b.cell or (a.cell == b.cell and a.slot < b.slot)


cdef class RectSubIndex:
    def __cinit__(self, double minx, double miny, double maxx, double maxy, uint32_t grid=64):
        self.bounds = RectC(minx, miny, maxx, maxy)
        self.grid = grid
        self.inv_w = grid / (maxx - minx)
        self.inv_h = grid / (maxy - miny)
        self.probes = 0
        self.postings = 0
        self.candidates = 0

    cdef uint32_t cell_x(self, double x) noexcept nogil:
        cdef double v = (x - self.bounds.minx) * self.inv_w
        if v <= 0.0:
            return 0
        if v >= self.grid - 1:
            return self.grid - 1
        return <uint32_t>v

    cdef uint32_t cell_y(self, double y) noexcept nogil:
        cdef double v = (y - self.bounds.miny) * self.inv_h
        if v <= 0.0:
            return 0
        if v >= self.grid - 1:
            return self.grid - 1
        return <uint32_t>v

    cdef uint32_t c_add(self, int64_t ext_id, const RectC* r, const int64_t* prog, int plen,
                        const int64_t* cover, int ncover, bint implied) noexcept nogil:
        cdef uint32_t slot, cx, cy, x0, x1, y0, y1
        cdef int i
        cdef term_t t
        cdef PostC p
        if self.free_slots.size():
            slot = self.free_slots.back()
            self.free_slots.pop_back()
        else:
            slot = <uint32_t>self.subs.size()
            self.subs.resize(slot + 1)
            self.progs.resize(slot + 1)
            self.hot.resize(slot + 1)
        self.hot[slot].stamp = 0
        self.hot[slot].ext_id = ext_id
        self.hot[slot].rect = r[0]
        self.subs[slot].rect = r[0]
        self.subs[slot].ext_id = ext_id
        self.subs[slot].alive = 1
        self.progs[slot].clear()
        for i in range(plen):
            self.progs[slot].push_back(prog[i])
        for i in range(ncover):
            self.progs[slot].push_back(cover[i])
        if ncover == 0:
            self.progs[slot].push_back(0)
        self.subs[slot].prog_pos = 0
        self.subs[slot].prog_len = plen
        self.subs[slot].cover_pos = plen
        self.subs[slot].cover_len = ncover if ncover else 1
        x0, x1 = self.cell_x(r.minx), self.cell_x(r.maxx)
        y0, y1 = self.cell_y(r.miny), self.cell_y(r.maxy)
        for i in range(self.subs[slot].cover_len):
            t = <term_t>self.progs[slot][plen + i]
            if t >= self.lists.size():
                self.lists.resize(t + 1)
                self.dirty.resize(t + 1, 0)
                self.dirs.resize(t + 1)
            for cy in range(y0, y1 + 1):
                for cx in range(x0, x1 + 1):
                    p.cell = cy * self.grid + cx
                    p.slot = slot | (POST_IMPLIED if implied else 0)
                    if x0 < cx < x1 and y0 < cy < y1:     # every point of the cell is inside
                        p.slot |= POST_INSIDE
                    self.lists[t].push_back(p)
                    self.postings += 1
            self.dirty[t] = 1
        return slot

    cdef void c_remove(self, uint32_t slot) noexcept nogil:
        cdef uint32_t i
        cdef size_t j, kept
        cdef term_t t
        cdef vector[PostC]* lst
        for i in range(self.subs[slot].cover_len):
            t = <term_t>self.progs[slot][self.subs[slot].cover_pos + i]
            lst = &self.lists[t]
            kept = 0
            for j in range(lst.size()):
                if (lst[0][j].slot & POST_SLOT) != slot:
                    lst[0][kept] = lst[0][j]
                    kept += 1
            self.postings -= lst.size() - kept
            lst.resize(kept)
            self.dirty[t] = 1
        self.subs[slot].alive = 0
        self.progs[slot].clear()
        self.free_slots.push_back(slot)

    cdef void c_probe(self, double x, double y, const MsgTermC* terms, int n,
                      vector[uint32_t]* out) noexcept nogil:
        cdef uint32_t cell = self.cell_y(y) * self.grid + self.cell_x(x)
        cdef int i
        cdef term_t t
        cdef size_t lo, hi, mid, size
        cdef uint32_t slot, raw
        cdef vector[PostC]* lst
        cdef const RectC* r
        self.probes += 1
        for i in range(n):
            t = terms[i].term
            if t >= self.lists.size() or self.lists[t].size() == 0:
                continue
            lst = &self.lists[t]
            if self.dirty[t]:
                self._sort(t)
            if self.dirs[t].size():
                lo, size = self.dirs[t][cell], self.dirs[t][cell + 1]
            else:
                lo, hi = 0, lst.size()
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if lst[0][mid].cell < cell:
                        lo = mid + 1
                    else:
                        hi = mid
                size = lst.size()
            while lo < size and lst[0][lo].cell == cell:
                raw = lst[0][lo].slot
                slot = raw & POST_SLOT
                if lo + PREFETCH_AHEAD < size:
                    prefetch(&self.hot[lst[0][lo + PREFETCH_AHEAD].slot & POST_SLOT])
                lo += 1
                if self.hot[slot].stamp == self.probes:
                    continue
                self.hot[slot].stamp = self.probes
                self.candidates += 1
                if not (raw & POST_INSIDE):
                    r = &self.hot[slot].rect
                    if not (r.minx <= x <= r.maxx and r.miny <= y <= r.maxy):
                        continue
                if (raw & POST_IMPLIED) or \
                        eval_program(self.progs[slot].data(), self.subs[slot].prog_len, terms, n, &self.stack):
                    out.push_back(slot)

    cdef void _sort(self, term_t t) noexcept nogil:
        cdef vector[PostC]* lst = &self.lists[t]
        cdef uint32_t c, ncells = self.grid * self.grid
        cdef size_t j = 0
        std_sort(lst.begin(), lst.end(), post_before)
        self.dirty[t] = 0
        self.dirs[t].clear()
        if lst.size() < DIRECTORY_MIN:
            return
        self.dirs[t].resize(ncells + 1)
        for c in range(ncells + 1):
            while j < lst.size() and lst[0][j].cell < c:
                j += 1
            self.dirs[t][c] = <uint32_t>j

    def sort_all(self):
        """Sort every list appended to since its last sort (after a bulk registration, so that
        the first probes do not pay for it)."""
        cdef size_t t
        with nogil:
            for t in range(self.lists.size()):
                if self.dirty[t]:
                    self._sort(<term_t>t)

    def size(self):
        return self.subs.size() - self.free_slots.size()

    def memory_bytes(self):
        cdef size_t t, dirs = 0
        for t in range(self.dirs.size()):
            dirs += self.dirs[t].capacity() * 4
        return self.postings * sizeof(PostC) + self.subs.size() * (sizeof(RectSubC) + 64) + dirs
