# cython: language_level=3
"""Rectangle subscriptions: which of them does a point with these terms match, without
scanning them all: :class:`RectSubIndex` (``knn``'s index of k-th distance boxes, design 1/2
``terms``, and ``range`` with ``range_keyword`` off).  The ``range`` kind's default,
:class:`~skype._core.kwrangeindex.KeywordRangeIndex` (keyword first), is in ``kwrangeindex.pyx``.

RectSubIndex layout (PS2Stream's GI2: a uniform grid with per-term lists).  The space is cut into
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

A rectangle that only grows (the ``knn`` kind's k-th distance box when a refill widens it)
is moved by :meth:`RectSubIndex.c_grow` without a removal: its postings stay (a cell strictly
inside the old rectangle is strictly inside the new one, so their flags hold), the cells it
gains go into the term's sorted *tail*, probed by binary search beside the list; a tail is
merged into its list once it is longer than ``TAIL_MIN`` and the square root of the list.  So a
repost costs its new cells times a short tail plus an amortized share of O(sqrt(list)) per
posting, instead of a pass over the whole list and its re-sort at the next probe.

Invariants: every live subscription has exactly one posting per (cover term, cell its
rectangle meets), in the term's list or its tail; cells are monotone in the coordinates, so a
point inside a rectangle lies in one of the rectangle's cells.  Nothing is stored per
(subscription, message).
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort, lower_bound as std_lower_bound
from libc.stdint cimport int64_t, uint32_t
from skype._core.types cimport term_t, RectC, MsgTermC, prefetch, PREFETCH_AHEAD
from skype._core.predicate cimport eval_program
from skype._core.cells cimport cell_of


cdef enum:
    DIRECTORY_MIN = 4096                # lists at least this long get a cell directory
    TAIL_MIN = 64                       # a tail is merged once past this and sqrt(list length)


cdef bint post_before(const PostC& a, const PostC& b) noexcept nogil:
    return a.cell < b.cell or (a.cell == b.cell and a.slot < b.slot)


cdef inline size_t _drop_slot(vector[PostC]* lst, uint32_t slot) noexcept nogil:
    """Remove ``slot``'s postings from ``lst`` in place, keeping the others' order; returns how many."""
    cdef size_t j, kept = 0, n = lst.size()
    for j in range(n):
        if (lst[0][j].slot & POST_SLOT) != slot:
            lst[0][kept] = lst[0][j]
            kept += 1
    lst.resize(kept)
    return n - kept


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
        return cell_of((x - self.bounds.minx) * self.inv_w, self.grid)

    cdef uint32_t cell_y(self, double y) noexcept nogil:
        return cell_of((y - self.bounds.miny) * self.inv_h, self.grid)

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
        self.subs[slot].implied = implied
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
                self.tails.resize(t + 1)
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
        cdef term_t t
        for i in range(self.subs[slot].cover_len):
            t = <term_t>self.progs[slot][self.subs[slot].cover_pos + i]
            self.postings -= _drop_slot(&self.lists[t], slot) + _drop_slot(&self.tails[t], slot)
            self.dirty[t] = 1
        self.subs[slot].alive = 0
        self.progs[slot].clear()
        self.free_slots.push_back(slot)

    cdef void c_grow(self, uint32_t slot, const RectC* r) noexcept nogil:
        """Move a subscription to a rectangle that holds its current one: the cells it gains
        are posted in the tails (its other postings and their flags stay valid)."""
        cdef RectSubC* s = &self.subs[slot]
        cdef uint32_t ox0 = self.cell_x(s.rect.minx), ox1 = self.cell_x(s.rect.maxx)
        cdef uint32_t oy0 = self.cell_y(s.rect.miny), oy1 = self.cell_y(s.rect.maxy)
        cdef uint32_t x0 = self.cell_x(r.minx), x1 = self.cell_x(r.maxx)
        cdef uint32_t y0 = self.cell_y(r.miny), y1 = self.cell_y(r.maxy)
        cdef uint32_t i, cx, cy, flags = slot | (POST_IMPLIED if s.implied else 0)
        cdef term_t t
        cdef PostC p
        cdef vector[PostC]* tail
        s.rect = r[0]
        self.hot[slot].rect = r[0]
        self.grown += 1
        for i in range(s.cover_len):
            t = <term_t>self.progs[slot][s.cover_pos + i]
            tail = &self.tails[t]
            for cy in range(y0, y1 + 1):
                for cx in range(x0, x1 + 1):
                    if ox0 <= cx <= ox1 and oy0 <= cy <= oy1:
                        continue                      # posted already
                    p.cell = cy * self.grid + cx
                    p.slot = flags | (POST_INSIDE if x0 < cx < x1 and y0 < cy < y1 else 0)
                    tail.insert(std_lower_bound(tail.begin(), tail.end(), p, post_before), p)
                    self.postings += 1
            if tail.size() > TAIL_MIN and tail.size() * tail.size() > self.lists[t].size():
                self._merge_tail(t)

    cdef void _merge_tail(self, term_t t) noexcept nogil:
        """The tail into its list (the list is re-sorted: it and the tail are sorted runs)."""
        cdef vector[PostC]* lst = &self.lists[t]
        cdef vector[PostC]* tail = &self.tails[t]
        cdef size_t i
        for i in range(tail.size()):
            lst.push_back(tail[0][i])
        tail.clear()
        self.merges += 1
        self._sort(t)

    cdef void c_probe(self, double x, double y, const MsgTermC* terms, int n,
                      vector[uint32_t]* out) noexcept nogil:
        cdef uint32_t cell = self.cell_y(y) * self.grid + self.cell_x(x)
        cdef int i
        cdef term_t t
        cdef size_t lo, hi, mid
        cdef vector[PostC]* lst
        self.probes += 1
        for i in range(n):
            t = terms[i].term
            if t >= self.lists.size():
                continue
            lst = &self.lists[t]
            if lst.size():
                if self.dirty[t]:
                    self._sort(t)
                if self.dirs[t].size():
                    self._probe_run(lst, self.dirs[t][cell], self.dirs[t][cell + 1], cell, x, y, terms, n, out)
                else:
                    lo, hi = 0, lst.size()
                    while lo < hi:
                        mid = (lo + hi) >> 1
                        if lst[0][mid].cell < cell:
                            lo = mid + 1
                        else:
                            hi = mid
                    self._probe_run(lst, lo, lst.size(), cell, x, y, terms, n, out)
            lst = &self.tails[t]
            if lst.size():
                lo, hi = 0, lst.size()
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if lst[0][mid].cell < cell:
                        lo = mid + 1
                    else:
                        hi = mid
                self._probe_run(lst, lo, lst.size(), cell, x, y, terms, n, out)

    cdef void _probe_run(self, vector[PostC]* lst, size_t lo, size_t size, uint32_t cell, double x, double y,
                         const MsgTermC* terms, int n, vector[uint32_t]* out) noexcept nogil:
        """The subscriptions of the run of ``cell`` starting at ``lo`` (before ``size``), checked."""
        cdef uint32_t slot, raw
        cdef const RectC* r
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
        if t < self.tails.size() and self.tails[t].size():     # a re-sort takes the tail in
            for j in range(self.tails[t].size()):
                lst.push_back(self.tails[t][j])
            self.tails[t].clear()
            j = 0
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

    # ------------------------------------------------------------------ Python access (tests)
    def add(self, int64_t ext_id, tuple rect, const int64_t[::1] cover):
        """Post a subscription without a predicate under its cover terms (none: term 0)."""
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        return self.c_add(ext_id, &r, NULL, 0, &cover[0] if cover.shape[0] else NULL, <int>cover.shape[0], True)

    def grow(self, uint32_t slot, tuple rect):
        """Move a subscription to a rectangle that holds its current one."""
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        self.c_grow(slot, &r)

    def remove(self, uint32_t slot):
        self.c_remove(slot)

    def probe(self, double x, double y, const uint32_t[::1] terms):
        """The ids of the subscriptions a point holding ``terms`` (ascending) matches, sorted."""
        cdef vector[MsgTermC] mt
        cdef vector[uint32_t] out
        cdef Py_ssize_t i
        mt.resize(terms.shape[0])
        for i in range(terms.shape[0]):
            mt[i].term = terms[i]
            mt[i].w = 1.0
        self.c_probe(x, y, mt.data(), <int>mt.size(), &out)
        return sorted(self.hot[out[i]].ext_id for i in range(out.size()))

    def tail_stats(self):
        return {"grown": self.grown, "merges": self.merges,
                "tail_postings": sum(self.tails[t].size() for t in range(self.tails.size()))}

    def size(self):
        return self.subs.size() - self.free_slots.size()

    def memory_bytes(self):
        cdef size_t t, dirs = 0
        for t in range(self.dirs.size()):
            dirs += self.dirs[t].capacity() * 4
        return self.postings * sizeof(PostC) + self.subs.size() * (sizeof(RectSubC) + 64) + dirs
