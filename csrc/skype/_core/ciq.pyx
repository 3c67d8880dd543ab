# cython: language_level=3
"""CIQ: the baseline subscription index of Chen et al. (ICDE 2015) as adapted by the paper.

Structure.  A quadtree (depth <= ``max_depth``) partitions the space.  Each subscription s is
copied into a *cover*: a set of at most ``budget`` disjoint quadtree cells covering the part of
the space where a message could still reach its threshold, i.e. the disk of radius
``R(s) = (1 - theta_S(s)) * MaxDist`` around s (all the space when theta_S <= 0).  The cover is
built by refining the cell nearest to s first.  For each cover cell c and each term t of s, the
list of (t, c) holds (s, MinT(s, c)), ordered by subscription id, where

    MinT(s, c) = (theta_s - alpha_s * (1 - MINDIST(s, c) / MaxDist)) / (1 - alpha_s)

is the text similarity a message located in c must reach (time decay removed, spec §4.5).

Dissemination.  The cells containing the message's location are one per quadtree level; in
each, the lists of the message's terms are merged document-at-a-time by subscription id,
accumulating TSim(s, m) exactly (every common term of s and m is in one of them).  A
subscription whose TSim reaches MinT is verified with its exact score.  Because a cover is a
disjoint set of cells, a subscription is met in at most one cell per message.

Safety.  MinT values are lower bounds (rounded down; a threshold decrease rebuilds the cover
and its MinT at once, an increase is applied lazily beyond ``theta_refresh``), so a skipped
subscription cannot score >= theta.  The cover keeps every cell where a message can qualify.
alpha = 1 subscriptions use MinT = -inf (the text part is irrelevant; they are verified in every
cover cell).
"""
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from cython.operator cimport dereference as deref, preincrement as inc
from libc.math cimport INFINITY
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memset
from skype._core.types cimport sid_t, RectC, MsgTermC
from skype._core.scoring cimport mindist, round_up, round_down
from skype._core.subindex cimport SubscriptionIndex, SubTable, SubHotC, CountersC

cdef double EPS = 1e-9
cdef double ALPHA_TEXT_LIMIT = 1.0 - 1e-6


cdef inline uint64_t cell_key(int depth, uint64_t code) noexcept nogil:
    return (<uint64_t>depth << 58) | code


cdef inline int key_depth(uint64_t key) noexcept nogil:
    return <int>(key >> 58)


cdef inline uint64_t key_code(uint64_t key) noexcept nogil:
    return key & ((<uint64_t>1 << 58) - 1)


cdef class CIQIndex(SubscriptionIndex):
    def __cinit__(self, SubTable table, double minx, double miny, double maxx, double maxy,
                  double max_dist, int budget=16, int max_depth=12, double theta_refresh=0.02):
        self.table = table
        self.bounds = RectC(minx, miny, maxx, maxy)
        self.max_dist = max_dist
        self.budget = budget if budget >= 1 else 1
        self.max_depth = max_depth if max_depth <= 28 else 28
        self.theta_refresh = theta_refresh
        self.entry_count = 0
        memset(&self.ctr, 0, sizeof(CountersC))

    # ------------------------------------------------------------------ geometry
    cdef void _cell_rect(self, uint64_t key, RectC* r) noexcept nogil:
        """Rectangle of a cell: Morton code bits interleave x (even) and y (odd), top first."""
        cdef int depth = key_depth(key), level
        cdef uint64_t code = key_code(key)
        cdef double minx = self.bounds.minx, maxx = self.bounds.maxx
        cdef double miny = self.bounds.miny, maxy = self.bounds.maxy, mid
        for level in range(depth):
            mid = (minx + maxx) * 0.5
            if (code >> (2 * (depth - 1 - level))) & 1:
                minx = mid
            else:
                maxx = mid
            mid = (miny + maxy) * 0.5
            if (code >> (2 * (depth - 1 - level) + 1)) & 1:
                miny = mid
            else:
                maxy = mid
        r.minx = minx
        r.maxx = maxx
        r.miny = miny
        r.maxy = maxy

    cdef inline uint64_t _child(self, uint64_t key, int q) noexcept nogil:
        return cell_key(key_depth(key) + 1, (key_code(key) << 2) | <uint64_t>q)

    # ------------------------------------------------------------------ covers
    cdef double _reach(self, sid_t sid) noexcept nogil:
        """R(s): no message farther than this can reach theta (MaxDist: anywhere)."""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef double theta_s
        if h.alpha <= 0.0:
            return INFINITY
        theta_s = (h.theta - EPS - (1.0 - h.alpha)) / h.alpha
        if theta_s <= 0.0:
            return INFINITY
        return (1.0 - theta_s) * self.max_dist * (1.0 + 1e-12) + 1e-12

    cdef float _min_t(self, sid_t sid, double dmin) noexcept nogil:
        cdef const SubHotC* h = &self.table.hot[sid]
        if h.alpha >= ALPHA_TEXT_LIMIT:
            return -INFINITY
        return round_down((h.theta - EPS - h.alpha * (1.0 - dmin / self.max_dist)) / (1.0 - h.alpha))

    cdef void _build_cover(self, sid_t sid, vector[CellRefC]* cover) noexcept nogil:
        """Disjoint cells covering the disk of reach around s, refined nearest-first."""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef double reach = self._reach(sid), d
        cdef vector[uint64_t] cells
        cdef vector[double] dist
        cdef size_t i, best
        cdef int q
        cdef uint64_t key, child
        cdef RectC r
        cdef CellRefC ref
        cells.push_back(cell_key(0, 0))
        dist.push_back(0.0)
        while True:
            # refine the nearest cell that can still be split, while the budget allows
            best = cells.size()
            for i in range(cells.size()):
                if key_depth(cells[i]) < self.max_depth and (best == cells.size() or dist[i] < dist[best]):
                    best = i
            if best == cells.size() or cells.size() + 3 > <size_t>self.budget:
                break
            key = cells[best]
            cells[best] = cells.back()
            dist[best] = dist.back()
            cells.pop_back()
            dist.pop_back()
            for q in range(4):
                child = self._child(key, q)
                self._cell_rect(child, &r)
                d = mindist(&r, h.x, h.y)
                if d <= reach:
                    cells.push_back(child)
                    dist.push_back(d)
            if cells.size() == 0:
                break
        cover.clear()
        for i in range(cells.size()):
            ref.key = cells[i]
            ref.min_t = self._min_t(sid, dist[i])
            cover.push_back(ref)

    cdef uint32_t _cell_id(self, uint64_t key) noexcept nogil:
        cdef uint32_t cid
        if self.cell_ids.count(key):
            return self.cell_ids[key]
        cid = <uint32_t>self.cell_keys.size()
        self.cell_ids[key] = cid
        self.cell_keys.push_back(key)
        return cid

    cdef void _insert_lists(self, sid_t sid) noexcept nogil:
        cdef vector[CellRefC]* cover = &self.covers[sid]
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef size_t i, pos
        cdef uint32_t j
        cdef uint64_t lkey
        cdef vector[CEntryC]* lst
        cdef CEntryC e
        for i in range(cover.size()):
            e.sid = sid
            e.min_t = cover[0][i].min_t
            for j in range(h.nterms):
                e.ws = round_up(self.table.terms[h.term_off + j].w)
                lkey = (<uint64_t>self.table.terms[h.term_off + j].term << 32) | self._cell_id(cover[0][i].key)
                lst = &self.lists[lkey]
                pos = lst.size()
                while pos > 0 and lst[0][pos - 1].sid > sid:
                    pos -= 1
                lst.insert(lst.begin() + pos, e)
                self.entry_count += 1

    cdef void _remove_lists(self, sid_t sid) noexcept nogil:
        cdef vector[CellRefC]* cover = &self.covers[sid]
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef size_t i, pos
        cdef uint32_t j
        cdef uint64_t lkey
        cdef vector[CEntryC]* lst
        for i in range(cover.size()):
            for j in range(h.nterms):
                lkey = (<uint64_t>self.table.terms[h.term_off + j].term << 32) | self.cell_ids[cover[0][i].key]
                lst = &self.lists[lkey]
                for pos in range(lst.size()):
                    if lst[0][pos].sid == sid:
                        lst.erase(lst.begin() + pos)
                        break
                self.entry_count -= 1
                if lst.size() == 0:
                    self.lists.erase(lkey)
        cover.clear()

    # ------------------------------------------------------------------ SubscriptionIndex API
    cdef void add(self, sid_t sid) noexcept nogil:
        if self.covers.size() <= sid:
            self.covers.resize(sid + 1)
        self._build_cover(sid, &self.covers[sid])
        self._insert_lists(sid)
        self.table.theta_idx[sid] = self.table.hot[sid].theta

    cdef void remove(self, sid_t sid) noexcept nogil:
        self._remove_lists(sid)

    cdef void theta_changed(self, sid_t sid) noexcept nogil:
        cdef double new = self.table.hot[sid].theta, old = self.table.theta_idx[sid]
        if new < old or new > old + self.theta_refresh or (old == 0.0 and new > 0.0):
            self._remove_lists(sid)
            self.table.theta_idx[sid] = new
            self._build_cover(sid, &self.covers[sid])
            self._insert_lists(sid)

    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        cdef int depth, j, best
        cdef uint64_t code = 0, key, lkey
        cdef double minx = self.bounds.minx, maxx = self.bounds.maxx
        cdef double miny = self.bounds.miny, maxy = self.bounds.maxy, mid, tsim, min_t
        cdef uint32_t cid
        cdef size_t c
        cdef sid_t sid = 0
        self.out.clear()
        self.ctr.messages += 1
        for depth in range(self.max_depth + 1):
            if depth > 0:
                mid = (minx + maxx) * 0.5
                if x >= mid:
                    minx = mid
                    code = (code << 2) | 1
                else:
                    maxx = mid
                    code = code << 2
                mid = (miny + maxy) * 0.5
                if y >= mid:
                    miny = mid
                    code |= 2
                else:
                    maxy = mid
            key = cell_key(depth, code)
            if not self.cell_ids.count(key):
                continue
            cid = self.cell_ids[key]
            self.ctr.cells_visited += 1
            # document-at-a-time over the message's lists in this cell
            self.cursors_list.clear()
            self.cursors_pos.clear()
            self.cursors_w.clear()
            for j in range(n):
                lkey = (<uint64_t>m[j].term << 32) | cid
                if self.lists.count(lkey):
                    self.cursors_list.push_back(&self.lists[lkey])
                    self.cursors_pos.push_back(0)
                    self.cursors_w.push_back(m[j].w)
            while True:
                best = -1
                for j in range(<int>self.cursors_list.size()):
                    if self.cursors_pos[j] < self.cursors_list[j].size():
                        if best < 0 or self.cursors_list[j][0][self.cursors_pos[j]].sid < sid:
                            best = j
                            sid = self.cursors_list[j][0][self.cursors_pos[j]].sid
                if best < 0:
                    break
                tsim = 0.0
                min_t = INFINITY
                for j in range(<int>self.cursors_list.size()):
                    c = self.cursors_pos[j]
                    if c < self.cursors_list[j].size() and self.cursors_list[j][0][c].sid == sid:
                        tsim += self.cursors_w[j] * self.cursors_list[j][0][c].ws
                        min_t = self.cursors_list[j][0][c].min_t
                        self.cursors_pos[j] = c + 1
                self.ctr.entries_visited += 1
                # Safe: tsim bounds TSim(s, m) from above (all common terms are among the merged
                # lists; weights rounded up) and MinT(s, c) is a lower bound of the text
                # similarity a message in this cell needs to reach theta.
                if tsim * (1.0 + 1e-12) < min_t - EPS:
                    continue
                self._verify(sid, x, y, m, n)
            if (maxx - minx) <= 0 or depth == self.max_depth:
                break

    cdef size_t memory(self) noexcept nogil:
        cdef size_t total = self.cell_keys.capacity() * 8 + self.cell_ids.size() * 32
        cdef size_t i
        total += self.lists.size() * (8 + 24 + 16) + self.entry_count * sizeof(CEntryC)
        for i in range(self.covers.size()):
            total += 24 + self.covers[i].capacity() * sizeof(CellRefC)
        return total

    def check_invariants(self):
        """Verify every structural invariant; raises AssertionError naming the first violation.

        * a live subscription's cover is the one ``_build_cover`` makes for its indexed
          threshold theta_idx (<= theta: raises are lazy), so every cell where a message can
          reach theta_idx is covered; its cells are disjoint (none is another's ancestor);
        * for each term of s and each cover cell, that (term, cell) list holds s exactly once,
          with the cover's MinT and the term's weight rounded up; lists are sorted by sid;
        * nothing else is listed: no removed subscription, no cell outside a cover
          (``entry_count`` counts every entry); the cell table is a bijection."""
        cdef sid_t sid
        cdef size_t i, a, b
        cdef uint32_t j
        cdef uint64_t lkey, ka, kb
        cdef double theta
        cdef vector[CellRefC] fresh
        cdef vector[CEntryC]* lst
        cdef vector[CellRefC]* cover
        cdef SubHotC* h
        cdef unordered_map[uint64_t, vector[CEntryC]].iterator it
        for i in range(self.cell_keys.size()):
            assert self.cell_ids[self.cell_keys[i]] == i, f"cell {i}: id table out of step"
        listed = 0
        for sid in range(self.table.ext_id.size()):
            h = &self.table.hot[sid]
            if not h.alive:
                assert sid >= self.covers.size() or self.covers[sid].size() == 0, f"sid {sid}: removed, still covered"
                continue
            assert self.table.theta_idx[sid] <= h.theta, f"sid {sid}: indexed theta above theta"
            theta = h.theta
            h.theta = self.table.theta_idx[sid]
            fresh.clear()
            self._build_cover(sid, &fresh)
            h.theta = theta
            cover = &self.covers[sid]
            assert cover.size() == fresh.size(), f"sid {sid}: cover of {cover.size()} cells, expected {fresh.size()}"
            for i in range(fresh.size()):
                assert cover[0][i].key == fresh[i].key and cover[0][i].min_t == fresh[i].min_t, (
                    f"sid {sid}: cover cell {i} differs from its threshold's cover")
            for a in range(fresh.size()):
                for b in range(fresh.size()):
                    ka, kb = fresh[a].key, fresh[b].key
                    if a != b and key_depth(ka) <= key_depth(kb):
                        assert key_code(kb) >> (2 * (key_depth(kb) - key_depth(ka))) != key_code(ka), (
                            f"sid {sid}: cover cells overlap")
            for i in range(fresh.size()):
                for j in range(h.nterms):
                    lkey = (<uint64_t>self.table.terms[h.term_off + j].term << 32) | self.cell_ids[fresh[i].key]
                    assert self.lists.count(lkey), f"sid {sid}: missing from the list of term {j}, cell {i}"
                    lst = &self.lists[lkey]
                    hits = 0
                    for a in range(lst.size()):
                        if lst[0][a].sid == sid:
                            hits += 1
                            assert lst[0][a].min_t == fresh[i].min_t, f"sid {sid}: stale MinT"
                            assert lst[0][a].ws == round_up(self.table.terms[h.term_off + j].w), f"sid {sid}: weight"
                    assert hits == 1, f"sid {sid}: listed {hits} times under term {j}, cell {i}"
                    listed += 1
        total = 0
        it = self.lists.begin()
        while it != self.lists.end():
            lst = &deref(it).second
            assert lst.size() > 0, "an empty list is kept"
            for i in range(1, lst.size()):
                assert lst[0][i - 1].sid < lst[0][i].sid, "a list is not sorted by sid"
            total += lst.size()
            inc(it)
        assert total == listed == self.entry_count, (
            f"{total} entries listed, {listed} expected from the covers, entry_count {self.entry_count}")
        return True

    def cover_sizes(self):
        import numpy as np
        return np.array([self.covers[i].size() for i in range(self.covers.size())], dtype=np.int64)
