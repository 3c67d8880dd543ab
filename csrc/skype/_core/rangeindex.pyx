# cython: language_level=3
"""Rectangle subscriptions (``range`` and ``terms`` kinds): which of them does a point with
these terms match, without scanning them all.

Layout (PS2Stream's GI2: a uniform grid with per-term lists).  The space is cut into
``grid x grid`` cells.  A subscription is posted once per cell its rectangle meets, in the list
of each of its *cover* terms (every message satisfying its predicate holds one of them: all
terms of ``any``, the rarest of ``all``, per expression as ``skype.queries`` derives it; term 0,
held by every message, when it has no predicate).  A term's list is an array of (cell, slot)
postings kept sorted (appends mark it dirty; it is re-sorted at the next probe), so the
postings of one cell are a contiguous run found by binary search.

Probe of a message at (x, y) with terms T: for each t in T (term 0 included), the run of
cell(x, y) in t's list; each subscription reached is checked exactly: rectangle (edges
included), then its predicate.  A probe stamp reports each subscription once.

Invariants: every live subscription has exactly one posting per (cover term, cell its
rectangle meets); cells are monotone in the coordinates, so a point inside a rectangle lies in
one of the rectangle's cells.  Nothing is stored per (subscription, message).
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.stdint cimport int64_t, uint32_t
from skype._core.types cimport term_t, RectC, MsgTermC
from skype._core.predicate cimport eval_program


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
                        const int64_t* cover, int ncover) noexcept nogil:
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
            self.stamp.resize(slot + 1, 0)
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
        p.slot = slot
        for i in range(self.subs[slot].cover_len):
            t = <term_t>self.progs[slot][plen + i]
            if t >= self.lists.size():
                self.lists.resize(t + 1)
                self.dirty.resize(t + 1, 0)
            for cy in range(y0, y1 + 1):
                for cx in range(x0, x1 + 1):
                    p.cell = cy * self.grid + cx
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
                if lst[0][j].slot != slot:
                    lst[0][kept] = lst[0][j]
                    kept += 1
            self.postings -= lst.size() - kept
            lst.resize(kept)
        self.subs[slot].alive = 0
        self.progs[slot].clear()
        self.free_slots.push_back(slot)

    cdef void c_probe(self, double x, double y, const MsgTermC* terms, int n,
                      vector[uint32_t]* out) noexcept nogil:
        cdef uint32_t cell = self.cell_y(y) * self.grid + self.cell_x(x)
        cdef int i
        cdef term_t t
        cdef size_t lo, hi, mid, size
        cdef uint32_t slot
        cdef vector[PostC]* lst
        cdef RectSubC* s
        self.probes += 1
        for i in range(n):
            t = terms[i].term
            if t >= self.lists.size() or self.lists[t].size() == 0:
                continue
            lst = &self.lists[t]
            if self.dirty[t]:
                std_sort(lst.begin(), lst.end(), post_before)
                self.dirty[t] = 0
            lo, hi = 0, lst.size()
            while lo < hi:
                mid = (lo + hi) >> 1
                if lst[0][mid].cell < cell:
                    lo = mid + 1
                else:
                    hi = mid
            size = lst.size()
            while lo < size and lst[0][lo].cell == cell:
                slot = lst[0][lo].slot
                lo += 1
                if self.stamp[slot] == self.probes:
                    continue
                self.stamp[slot] = self.probes
                self.candidates += 1
                s = &self.subs[slot]
                if s.rect.minx <= x <= s.rect.maxx and s.rect.miny <= y <= s.rect.maxy and \
                        eval_program(self.progs[slot].data(), s.prog_len, terms, n, &self.stack):
                    out.push_back(slot)

    def size(self):
        return self.subs.size() - self.free_slots.size()

    def memory_bytes(self):
        return self.postings * sizeof(PostC) + self.subs.size() * (sizeof(RectSubC) + 64)
