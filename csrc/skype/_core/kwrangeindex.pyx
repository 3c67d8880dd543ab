# cython: language_level=3
"""Range subscriptions keyword first: :class:`KeywordRangeIndex`, the ``range`` kind's default
index (split from ``rangeindex.pyx``, whose :class:`RectSubIndex` is the grid of per-term lists
that ``knn`` uses).  The algorithm and its invariant are in the class docstring below; cells are
the shared mapping of ``cells.pxd``."""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.stdint cimport int64_t, uint32_t
from skype._core.types cimport term_t, RectC, MsgTermC, prefetch, PREFETCH_AHEAD
from skype._core.predicate cimport eval_program, OP_AND, OP_OR
from skype._core.cells cimport cell_of


cdef enum:
    KW_SMALL = 8                        # a term with at most this many subscriptions: one cell
    KW_SPAN = 6                         # aim: an average rectangle spans this many cells per side
    KW_MAXG = 64                        # cells per side at most


cdef inline uint32_t kw_cell(double v, double lo, double inv, uint32_t g) noexcept nogil:
    """Monotone in v: a point inside a rectangle lies between the cells of its edges."""
    return cell_of((v - lo) * inv, g)


cdef inline uint32_t kw_side(double span, double extent, size_t n) noexcept nogil:
    """Cells per side for rectangles of mean side ``span`` in a box of side ``extent``."""
    cdef uint32_t g = 1
    cdef double want
    if n <= KW_SMALL or not (extent > 0.0) or extent > 1e300:
        return 1
    want = KW_SPAN * extent / span if span > 0.0 else KW_MAXG
    while g < KW_MAXG and g < want:
        g *= 2
    return g


cdef class KeywordRangeIndex:
    """Range subscriptions keyword first (FAST's idea): a subscription whose predicate is a
    conjunction sits only under its rarest term; a disjunction or an expression under each of
    its cover terms.  Each term has its own grid over the bounding box of its rectangles, its
    resolution chosen from how many they are and how large (rare terms: one cell, a plain list).
    A record (16 bytes) carries what the probe needs: the subscription's id, whether the cell is
    inside the rectangle, and its *check terms* (one inline; several in the term's pool):

    * a conjunction: the other terms, all of which the message must hold;
    * a disjunction or an expression under cover term t: the cover terms before t, none of which
      the message may hold, so that a message reaches it through its first held cover term only
      (reported once without a per-subscription stamp); an expression then runs its program.

    Probe of a message: its terms are marked (a byte per term); for each term, the records of the
    message's cell in the term's grid; a rectangle test for border cells, the marks of the check
    terms.  Exact: every point inside a rectangle falls in one of its cells (cells are
    monotone in the coordinates), a matching message holds its rarest term / a cover term.
    Invariant: every live subscription has one record per cell its rectangle meets in the grid
    of each term it sits under, once that term's grid is built (``dirty`` until then)."""

    def __cinit__(self):
        self.records = 0
        self.candidates = 0
        self.builds = 0

    cdef uint32_t c_add(self, int64_t ext_id, const RectC* r, const int64_t* prog, int plen,
                        const int64_t* cover, int ncover) noexcept nogil:
        cdef uint32_t slot
        cdef int i
        cdef bint has_and = False, has_or = False
        cdef vector[uint32_t] terms
        cdef uint32_t top = 0
        if self.free_slots.size():
            slot = self.free_slots.back()
            self.free_slots.pop_back()
        else:
            slot = <uint32_t>self.rects.size()
            self.rects.resize(slot + 1)
            self.ext_ids.resize(slot + 1)
            self.progs.resize(slot + 1)
            self.plens.resize(slot + 1)
            self.ncovers.resize(slot + 1)
            self.checks.resize(slot + 1)
            self.modes.resize(slot + 1)
            self.alive.resize(slot + 1)
        self.rects[slot] = r[0]
        self.ext_ids[slot] = ext_id
        self.alive[slot] = 1
        self.plens[slot] = plen
        self.ncovers[slot] = ncover
        self.progs[slot].clear()
        for i in range(plen):
            self.progs[slot].push_back(prog[i])
            has_and = has_and or prog[i] == OP_AND
            has_or = has_or or prog[i] == OP_OR
        for i in range(ncover):
            self.progs[slot].push_back(cover[i])
        self.checks[slot].clear()
        if ncover == 0:                      # no predicate (or, defensively, no cover): term 0
            self.modes[slot] = (KW_EXPR >> 24) if plen else 0
            self.members.resize(max(self.members.size(), <size_t>1))
            self._post(0, slot)
            return slot
        if not has_or:                       # a conjunction: under its rarest term only
            self.modes[slot] = 0
            for i in range(plen):
                if prog[i] >= 0 and prog[i] != cover[0]:
                    terms.push_back(<uint32_t>prog[i])
            top = <uint32_t>cover[0]
        else:                                # under each cover term, deduplicated by the first held
            self.modes[slot] = ((KW_NONE | KW_EXPR) if has_and else KW_NONE) >> 24
            for i in range(ncover):
                terms.push_back(<uint32_t>cover[i])
        std_sort(terms.begin(), terms.end())
        for i in range(<int>terms.size()):
            if i == 0 or terms[i] != terms[i - 1]:
                self.checks[slot].push_back(terms[i])
                top = max(top, terms[i])
        if top >= self.mark.size():
            self.mark.resize(top + 1, 0)
        if self.members.size() <= top:
            self.members.resize(top + 1)
        if not has_or:
            self._post(<term_t>cover[0], slot)
        else:
            for i in range(<int>self.checks[slot].size()):
                self._post(self.checks[slot][i], slot)
        return slot

    cdef void _post(self, term_t t, uint32_t slot) noexcept nogil:
        if t >= self.grids.size():
            self.grids.resize(t + 1)
            self.recs.resize(t + 1)
            self.starts.resize(t + 1)
            self.pools.resize(t + 1)
            if self.members.size() <= t:
                self.members.resize(t + 1)
        self.members[t].push_back(slot)
        self.grids[t].dirty = 1

    cdef void c_remove(self, uint32_t slot) noexcept nogil:
        cdef size_t j
        if self.modes[slot] & (KW_NONE >> 24):
            for j in range(self.checks[slot].size()):
                self._unpost(self.checks[slot][j], slot)
        elif self.ncovers[slot] == 0:
            self._unpost(0, slot)
        else:
            self._unpost(<term_t>self.progs[slot][self.plens[slot]], slot)
        self.alive[slot] = 0
        self.progs[slot].clear()
        self.checks[slot].clear()
        self.free_slots.push_back(slot)

    cdef void _unpost(self, term_t t, uint32_t slot) noexcept nogil:
        cdef vector[uint32_t]* m = &self.members[t]
        cdef size_t j
        for j in range(m.size()):
            if m[0][j] == slot:
                m[0][j] = m.back()
                m.pop_back()
                break
        self.grids[t].dirty = 1

    cdef void _build(self, term_t t) noexcept nogil:
        """Lay out term t's records: grid resolution from its rectangles, records grouped by
        cell (a counting sort)."""
        cdef vector[uint32_t]* m = &self.members[t]
        cdef KwGridC* g = &self.grids[t]
        cdef vector[KwRecC]* out = &self.recs[t]
        cdef vector[uint32_t]* st = &self.starts[t]
        cdef size_t i, n = m.size(), ncells
        cdef uint32_t slot, cx, cy, x0, x1, y0, y1, k, pos, mode
        cdef double sw = 0.0, sh = 0.0
        cdef RectC box
        cdef const RectC* r
        cdef KwRecC rec
        cdef vector[uint32_t]* chk
        cdef vector[uint32_t]* pool = &self.pools[t]
        cdef uint32_t nchk
        self.records -= out.size()
        out.clear()
        st.clear()
        pool.clear()
        g.dirty = 0
        self.builds += 1
        if n == 0:
            return
        box = self.rects[m[0][0]]
        for i in range(n):
            r = &self.rects[m[0][i]]
            box.minx = min(box.minx, r.minx)
            box.miny = min(box.miny, r.miny)
            box.maxx = max(box.maxx, r.maxx)
            box.maxy = max(box.maxy, r.maxy)
            sw += r.maxx - r.minx
            sh += r.maxy - r.miny
        g.box = box
        g.gx = kw_side(sw / n, box.maxx - box.minx, n)
        g.gy = kw_side(sh / n, box.maxy - box.miny, n)
        while <size_t>g.gx * g.gy > 16 * n:  # no more cells than the records could fill
            if g.gx >= g.gy:
                g.gx //= 2
            else:
                g.gy //= 2
        g.inv_w = g.gx / (box.maxx - box.minx) if g.gx > 1 else 0.0
        g.inv_h = g.gy / (box.maxy - box.miny) if g.gy > 1 else 0.0
        ncells = <size_t>g.gx * g.gy
        st.resize(ncells + 1, 0)
        for i in range(n):                  # count per cell, then place
            r = &self.rects[m[0][i]]
            x0, x1 = kw_cell(r.minx, box.minx, g.inv_w, g.gx), kw_cell(r.maxx, box.minx, g.inv_w, g.gx)
            y0, y1 = kw_cell(r.miny, box.miny, g.inv_h, g.gy), kw_cell(r.maxy, box.miny, g.inv_h, g.gy)
            for cy in range(y0, y1 + 1):
                for cx in range(x0, x1 + 1):
                    st[0][cy * g.gx + cx + 1] += 1
        for i in range(ncells):
            st[0][i + 1] += st[0][i]
        out.resize(st[0][ncells])
        self.records += out.size()
        for i in range(n):
            slot = m[0][i]
            r = &self.rects[slot]
            chk = &self.checks[slot]
            mode = (<uint32_t>self.modes[slot]) << 24
            rec.ext_id = self.ext_ids[slot]
            nchk = <uint32_t>chk.size()
            if mode & KW_NONE:               # the cover terms before t
                nchk = 0
                while nchk < chk.size() and chk[0][nchk] < t:
                    nchk += 1
            rec.chk = 0
            if nchk == 1:
                mode |= KW_ONE
                rec.chk = chk[0][0]
            elif nchk > 1:
                mode |= KW_POOL
                rec.chk = <uint32_t>pool.size()
                pool.push_back(nchk)
                for k in range(nchk):
                    pool.push_back(chk[0][k])
            rec.slot = slot | mode
            x0, x1 = kw_cell(r.minx, box.minx, g.inv_w, g.gx), kw_cell(r.maxx, box.minx, g.inv_w, g.gx)
            y0, y1 = kw_cell(r.miny, box.miny, g.inv_h, g.gy), kw_cell(r.maxy, box.miny, g.inv_h, g.gy)
            for cy in range(y0, y1 + 1):
                for cx in range(x0, x1 + 1):
                    pos = st[0][cy * g.gx + cx]
                    st[0][cy * g.gx + cx] += 1
                    out[0][pos] = rec
                    if x0 < cx < x1 and y0 < cy < y1:     # every point of the cell is inside
                        out[0][pos].slot |= KW_INSIDE
        for i in range(ncells, 0, -1):       # the placing advanced each start to the next cell's
            st[0][i] = st[0][i - 1]
        st[0][0] = 0

    cdef size_t c_probe_ids(self, double x, double y, const MsgTermC* terms, int n,
                            vector[int64_t]* out) noexcept nogil:
        """Append the ids of the subscriptions the message at (x, y) with these terms (ascending)
        matches; returns how many."""
        cdef size_t before = out.size(), lo, hi, j, base, got
        cdef int64_t* dst
        cdef int i
        cdef uint32_t raw, slot, k, cell
        cdef term_t t
        cdef KwGridC* g
        cdef const KwRecC* rs
        cdef const KwRecC* rec
        cdef const RectC* rc
        cdef const uint32_t* chk
        cdef const uint32_t* pool
        cdef bint held_any, held_all
        for i in range(n):
            t = terms[i].term
            if t < self.mark.size():
                self.mark[t] = 1
        for i in range(n):
            t = terms[i].term
            if t >= self.grids.size() or (i and terms[i - 1].term == t):
                continue
            g = &self.grids[t]
            if g.dirty:
                self._build(t)
            if self.recs[t].size() == 0 or not (g.box.minx <= x <= g.box.maxx and g.box.miny <= y <= g.box.maxy):
                continue
            rs = self.recs[t].data()
            pool = self.pools[t].data()
            if g.gx == 1 and g.gy == 1:
                lo, hi = 0, self.recs[t].size()
            else:
                cell = kw_cell(y, g.box.miny, g.inv_h, g.gy) * g.gx + kw_cell(x, g.box.minx, g.inv_w, g.gx)
                lo, hi = self.starts[t][cell], self.starts[t][cell + 1]
            self.candidates += hi - lo
            base = out.size()                # room for every record of the cell, cut to the matches
            out.resize(base + hi - lo)
            dst = out.data() + base
            got = 0
            for j in range(lo, hi):
                rec = &rs[j]
                raw = rec.slot
                slot = raw & KW_SLOT
                if j + PREFETCH_AHEAD < hi:      # border records read their rectangle
                    prefetch(&self.rects[rs[j + PREFETCH_AHEAD].slot & KW_SLOT])
                if not (raw & KW_INSIDE):
                    rc = &self.rects[slot]
                    if not (rc.minx <= x <= rc.maxx and rc.miny <= y <= rc.maxy):
                        continue
                if raw & (KW_ONE | KW_POOL):
                    if raw & KW_ONE:
                        held_any = self.mark[rec.chk]
                        held_all = held_any
                    else:
                        chk = pool + rec.chk + 1
                        held_any = False
                        held_all = True
                        for k in range(pool[rec.chk]):
                            if self.mark[chk[k]]:
                                held_any = True
                            else:
                                held_all = False
                    if (held_any if raw & KW_NONE else not held_all):
                        continue             # NONE: reported through an earlier cover term
                if (raw & KW_EXPR) and not eval_program(self.progs[slot].data(), self.plens[slot], terms, n,
                                                        &self.stack):
                    continue
                dst[got] = rec.ext_id
                got += 1
            out.resize(base + got)
        for i in range(n):
            t = terms[i].term
            if t < self.mark.size():
                self.mark[t] = 0
        return out.size() - before

    def sort_all(self):
        """Build every grid changed since its last build (after a bulk registration)."""
        cdef size_t t
        with nogil:
            for t in range(self.grids.size()):
                if self.grids[t].dirty:
                    self._build(<term_t>t)

    def size(self):
        return self.rects.size() - self.free_slots.size()

    def memory_bytes(self):
        cdef size_t t, extra = 0
        for t in range(self.starts.size()):
            extra += self.starts[t].capacity() * 4 + self.members[t].capacity() * 4
        for t in range(self.pools.size()):
            extra += self.pools[t].capacity() * 4
        return self.records * sizeof(KwRecC) + self.rects.size() * (sizeof(RectC) + 96) + extra
