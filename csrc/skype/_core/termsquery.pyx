# cython: language_level=3
"""The continuous ``terms`` kind: the top-k terms of a rectangle's window messages.

:class:`TermsKind` is one of the kinds :class:`~skype._core.querycore.QueryCore` holds behind
the :class:`~skype._core.querykind.QueryKind` hooks.  Design 3 (``set_blocks``, the facade's
default) hands each message to :class:`~skype._core.termblocks.TermBlocks` and its netting to
``TermBlocks.c_flush``; designs 1 and 2 (below) apply a message to each terms subscription it
enters or leaves (``_region_message``), re-rank it (after the pop, at expiry), and net each
touched subscription's top-k at the step's end.

Counts are not kept per subscription.  The count of a term in a rectangle is read
from the query window's per-term trees (subtree counts of the nodes inside the rectangle, the
cut leaves scanned: :meth:`QueryWindow.c_count_in`), shared by every subscription.  A
subscription keeps a *buffer* of at most ``cap = knn_factor * k`` terms with their exact counts,
sorted by the key (count desc, label): labels are 32-bit integers in the order of the term
names (the facade assigns them with gaps and relabels every term when a gap runs out), and a
``bound``: no term outside the buffer has a smaller key (UINT64_MAX: every term of the
rectangle is in the buffer).  Invariant: the buffer's counts are exact and the bound holds, so
its first k entries are the top-k whenever the k-th key is below the bound (or the bound is
UINT64_MAX).  An arrival in the rectangle adds 1 to its terms in the buffer; a term outside it
gets its exact count from the trees and enters when it ranks before the last entry (the entry
pushed out lowers the bound to its key), or else lowers the bound to its own key; when even its
count over the whole window (its tree's root count) ranks after the last entry, that count's
key bounds it without a walk; the walk itself is breadth first and stops as soon as its upper
bound (inside + cut leaves + open nodes) falls below the last entry's count, the cut leaves
scanned only when it does not (``QueryWindow.c_count_bounded``).  A walk that ends on a bound
leaves it in the subscription's ``MEMO`` direct-mapped slots; each later arrival of the term
in the rectangle adds one to it (expiries leave it: a count only falls), and while it stays
below the last entry's count it bounds the term with no walk.  Invariant: a remembered term is
outside the buffer and its remembered value bounds its count (cleared when it enters the
buffer and at every refill).  Per message the terms are
marked once and one pass over each buffer finds those it holds.  An expiry
subtracts 1 from its terms in the buffer (outside terms only fall: the bound stays true).  When
the top-k is no longer proven, the buffer is refilled from a count of the rectangle's messages
(the snapshot ``terms`` walk).  Memory per subscription is O(cap), whatever its rectangle holds.

Design 2 (``set_grid(cells)``, the facade's default; issue 26): before any per-subscription
state is read, an arriving outside term is bounded by the shared per-cell counts of
:class:`~skype._core.termgrid.TermGrid` (its count over the grid cells the rectangle meets, four
reads of a table that the message's other subscriptions read too); only when that bound could
still rank before the last entry is the term's tree walked.  With the grid no bounds are
remembered (``MEMO`` slots are not allocated): their reads were one cache miss per subscription
and term, more than the walks they saved.
"""
import numpy as np
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libcpp.algorithm cimport partial_sort
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, RectC, MsgTermC
from skype._core.window cimport MsgC
from skype._core.querywindow cimport QueryWindow
from skype._core.rangeindex cimport RectSubIndex
from skype._core.termgrid cimport TermGrid, CellRangeC
from skype._core.termblocks cimport TermBlocks
from skype._core.termrank cimport emit_set_changes


cdef class TermsKind(QueryKind):
    def __cinit__(self, QueryWindow qw, uint32_t grid=64, uint32_t knn_factor=2):
        cdef RectC b = qw.index.bounds
        self.qw = qw
        self.regions = RectSubIndex(b.minx, b.miny, b.maxx, b.maxy, grid)
        self.knn_factor = knn_factor
        self.step = 1                    # touch stamps start at 0: no slot is touched yet

    def prepare(self):
        self.regions.sort_all()

    # ------------------------------------------------------------------ the stream's hooks
    cdef void _apply(self, const MsgC* m, const MsgTermC* mt, int delta) noexcept nogil:
        """A message arrives (+1, in the window already) or expires (-1, still in it)."""
        cdef size_t i
        cdef uint32_t slot
        self._terms_window(m.x, m.y, mt, m.nterms, delta)
        self.hits.clear()
        if self.blocks_on:                     # design 3: the blocks' rows, crossings noted
            self.blocks.c_event(m.x, m.y, mt, m.nterms, delta)
        else:
            self.regions.c_probe(m.x, m.y, mt, m.nterms, &self.hits)
        self.matches += self.hits.size()
        self._mark_terms(mt, m.nterms, 1)
        for i in range(self.hits.size()):
            slot = self.hits[i]
            self._region_touch(slot)
            self._region_message(slot, mt, m.nterms, delta)
            if delta > 0:
                self.region_top[slot].clear()
                self._region_rank(slot, &self.region_top[slot])
        self._mark_terms(mt, m.nterms, 0)

    cdef void c_arrive(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil:
        self._apply(m, mt, 1)

    cdef void c_expire(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil:
        self._apply(m, mt, -1)

    cdef void c_expired(self, int64_t at) noexcept nogil:
        """Designs 1/2: the expiring message's subscriptions re-ranked once it left the window."""
        cdef size_t i
        for i in range(self.hits.size()):
            self.region_top[self.hits[i]].clear()
            self._region_rank(self.hits[i], &self.region_top[self.hits[i]])

    cdef void c_net(self, int64_t at) noexcept nogil:
        self._terms_net(at)
        self.step += 1

    def subscribe(self, int64_t ext_id, tuple rect, uint32_t k):
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        cdef uint32_t slot
        self.qw.c_need_term_trees()         # term counts in rectangles are read from them
        if self.blocks_on:                  # design 3: a lane of a block
            if self.grid_cells and not self.grid_on:
                self._start_grid()
                self.blocks.c_set_grid(self.grid)
            return self.blocks.c_add(ext_id, &r, k)
        slot = self.regions.c_add(ext_id, &r, NULL, 0, NULL, 0, True)
        if slot >= self.region.size():
            self.region.resize(slot + 1)
            self.region_buf.resize(slot + 1)
            if not self.grid_cells:             # design 2 keeps no remembered bounds
                self.region_memo.resize((slot + 1) * MEMO, 0)
            self.region_top.resize(slot + 1)
            self.region_touch_step.resize(slot + 1, 0)
            self.region_before.resize(slot + 1)
        self.region[slot] = RegionSubC(r, ext_id, k, k * max(self.knn_factor, 2), 0xFFFFFFFFFFFFFFFFu, 1)
        if self.grid_cells and not self.grid_on:
            self._start_grid()
        if self.grid_on:
            if slot >= self.region_cells.size():
                self.region_cells.resize(slot + 1)
            self.region_cells[slot] = self.grid.c_cells(&r)
        self._region_refill(slot)
        self.region_top[slot].clear()
        self._region_rank(slot, &self.region_top[slot])
        return slot

    def set_grid(self, uint32_t cells, uint32_t create_at=32, uint32_t drop_below=16):
        """Design 2 on (``cells`` per side of the shared count grid; a term's table from
        ``create_at`` window messages until it falls below ``drop_below``) or off (0 cells).  It
        starts with the first terms subscription (or now, when there is one)."""
        cdef size_t slot
        self.grid_cells = cells
        self.region_memo.assign(0 if cells else self.region.size() * MEMO, 0)
        self.grid_create_at = create_at
        self.grid_drop_below = drop_below
        self.grid_on = False
        self.grid = None
        if cells and (self.regions.size() or (self.blocks_on and self.blocks.size())):
            self._start_grid()
            for slot in range(self.region.size()):
                if self.region[slot].alive:
                    self.region_cells[slot] = self.grid.c_cells(&self.region[slot].rect)
        if self.blocks_on:
            self.blocks.c_set_grid(self.grid if self.grid_on else None)

    def set_blocks(self, bint on, uint32_t cells=64, uint32_t centre_cells=64, uint32_t gate_factor=2,
                   uint32_t fill_factor=4):
        """Design 3 on (lanes in blocks of 64: ``termblocks.pyx``; ``cells`` per side of the index
        of blocks, lanes grouped by the cell of their centre among ``centre_cells`` per side; a
        lane's gate at its ``gate_factor * k``-th term, ``fill_factor * k`` terms tracked after a
        refill) or off (design 1/2).  Only before the first terms subscription."""
        cdef RectC b = self.qw.index.bounds
        if self.regions.size() or (self.blocks is not None and self.blocks.size()):
            raise RuntimeError("the terms design is chosen before the first terms subscription")
        self.blocks_on = on
        self.blocks = None
        if on:
            self.blocks = TermBlocks(self.qw, b.minx, b.miny, b.maxx, b.maxy, cells, centre_cells, gate_factor,
                                     fill_factor)
            self.blocks.labels = &self.labels
            self.blocks.c_set_grid(self.grid if self.grid_on else None)

    def _start_grid(self):
        cdef RectC b = self.qw.index.bounds
        self.grid = TermGrid(self.qw, b.minx, b.miny, b.maxx, b.maxy, self.grid_cells, self.grid_create_at,
                             self.grid_drop_below)
        self.region_cells.resize(self.region.size())
        self.grid_on = True

    cdef void _terms_window(self, double x, double y, const MsgTermC* mt, uint32_t nterms, int delta) noexcept nogil:
        """A message arrives (+1, in the window already) or expires (-1, still in it): the shared
        per-cell counts follow."""
        if self.grid_on:
            self.grid.c_message(x, y, mt, nterms, delta)

    def grid_stats(self):
        out = {"grid_checks": self.region_grid_checks, "grid_bounded": self.region_grid_bounded}
        if self.grid_on:
            out.update({f"grid_{k}": v for k, v in self.grid.stats().items()})
        return out

    def grid_upper(self, int64_t term, tuple rect):
        """The shared counts' bound of a vocabulary term over the cells ``rect`` meets (None
        without a table): for tests."""
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        cdef CellRangeC c
        cdef uint32_t count
        if not self.grid_on:
            return None
        c = self.grid.c_cells(&r)
        return count if self.grid.c_upper(<term_t>(term + 1), &c, &count) else None

    def unsubscribe(self, uint32_t slot):
        if self.blocks_on:
            self.blocks.c_remove(slot)
            return
        self.regions.c_remove(slot)
        self.region[slot].alive = 0
        self.region_buf[slot].clear()
        self.region_buf[slot].shrink_to_fit()
        self.region_top[slot].clear()

    # ------------------------------------------------------------------ buffers, bounds, walks
    cdef void _region_add(self, uint32_t slot, term_t t, int delta) noexcept nogil:
        """Term t's count in the slot's rectangle moved by delta (+1: the arriving message is in
        the window already; -1: the expiring one may still be): the buffer and bound updated."""
        cdef vector[pair[uint64_t, term_t]]* b = &self.region_buf[slot]
        cdef size_t i, n = b.size(), pos = n
        cdef uint32_t c
        cdef pair[uint64_t, term_t] e
        for i in range(n):
            if b[0][i].second == t:
                pos = i
                break
        if pos < n:                                   # in the buffer: exact count, move it
            self.region_updates += 1
            c = key_count(b[0][pos].first)
            if delta < 0 and c <= 1:
                b.erase(b.begin() + pos)
                return
            e = rank_key(c + 1 if delta > 0 else c - 1, self.labels[t], t)
            b[0][pos] = e
            while pos > 0 and b[0][pos - 1].first > e.first:
                b[0][pos] = b[0][pos - 1]
                pos -= 1
            while pos + 1 < n and b[0][pos + 1].first < e.first:
                b[0][pos] = b[0][pos + 1]
                pos += 1
            b[0][pos] = e
            return
        if delta > 0:                                 # outside terms only fall: the bound holds
            self._region_outside(slot, t)

    cdef void _mark_terms(self, const MsgTermC* mt, uint32_t nterms, uint8_t on) noexcept nogil:
        cdef uint32_t ti
        for ti in range(1, nterms):
            if mt[ti].term >= self.in_msg.size():
                self.in_msg.resize(mt[ti].term + 1, 0)
            self.in_msg[mt[ti].term] = on

    cdef void _region_message(self, uint32_t slot, const MsgTermC* mt, uint32_t nterms, int delta) noexcept nogil:
        """A message (its terms marked in ``in_msg``) enters (+1) or leaves (-1) the slot's rectangle:
        one pass over the buffer finds the terms it holds; only an arrival's other terms are
        looked up (expiring terms outside the buffer only fall)."""
        cdef vector[pair[uint64_t, term_t]]* b = &self.region_buf[slot]
        cdef size_t i, j
        cdef uint32_t ti
        cdef term_t t
        cdef bint held
        self.found.clear()
        self.region_scans += 1
        for i in range(b.size()):
            t = b[0][i].second
            if t < self.in_msg.size() and self.in_msg[t]:
                self.found.push_back(t)
        for i in range(self.found.size()):
            self._region_add(slot, self.found[i], delta)
        if delta < 0:
            return
        for ti in range(1, nterms):
            t = mt[ti].term
            held = False
            for j in range(self.found.size()):
                if self.found[j] == t:
                    held = True
                    break
            if not held:
                self._region_outside(slot, t)

    cdef void _region_outside(self, uint32_t slot, term_t t) noexcept nogil:
        """An arriving message in the rectangle holds t, a term outside the buffer."""
        cdef vector[pair[uint64_t, term_t]]* b = &self.region_buf[slot]
        cdef RegionSubC* s = &self.region[slot]
        cdef size_t n = b.size(), pos
        cdef uint32_t need = 0, ub
        cdef pair[uint64_t, term_t] e
        cdef size_t mi = <size_t>slot * MEMO + ((t * 2654435761u) >> 7) % MEMO
        cdef uint64_t mv = 0 if self.grid_on else self.region_memo[mi]
        if mv and <term_t>(mv >> 32) == t:
            # a remembered upper bound of t's count here, plus this arrival: still below the
            # last entry's count, it bounds t without a walk
            ub = <uint32_t>(mv & 0xFFFFFFFFu) + 1
            if n >= s.cap and ub < key_count(b.back().first):
                self.region_memo[mi] = (<uint64_t>t << 32) | ub
                self.region_memo_hits += 1
                e = rank_key(ub, self.labels[t], t)
                if e.first < s.bound:
                    s.bound = e.first
                return
            self.region_memo[mi] = 0
        if n >= s.cap and t < self.qw.index.root.size() and self.qw.index.root[t] >= 0:
            # the term's window count bounds its count here: when even that ranks after the last
            # entry, the term stays out and its key is bounded without a walk (rare terms)
            e = rank_key(self.qw.index.nodes[self.qw.index.root[t]].count, self.labels[t], t)
            if e.first >= b.back().first:
                if e.first < s.bound:
                    s.bound = e.first
                return
        if self.grid_on and n >= s.cap:
            # the shared per-cell counts bound it over the cells the rectangle meets (design 2)
            self.region_grid_checks += 1
            if self.grid.c_upper(t, &self.region_cells[slot], &ub):
                e = rank_key(ub, self.labels[t], t)
                if e.first >= b.back().first:
                    self.region_grid_bounded += 1
                    if e.first < s.bound:
                        s.bound = e.first
                    return
        self.region_walks += 1
        if n >= s.cap:           # a count below the last entry's ranks after it: a bound will do
            need = key_count(b.back().first)
        e = rank_key(self.qw.c_count_bounded(t, &s.rect, need), self.labels[t], t)
        if key_count(e.first) < need:
            self.region_bounded += 1
        if n >= s.cap and e.first >= b.back().first:
            if e.first < s.bound:
                s.bound = e.first
            if not self.grid_on:
                self.region_memo[mi] = (<uint64_t>t << 32) | key_count(e.first)   # raised by each arrival
            return
        pos = n
        while pos > 0 and b[0][pos - 1].first > e.first:
            pos -= 1
        b.insert(b.begin() + pos, e)
        if b.size() > s.cap:
            if b.back().first < s.bound:
                s.bound = b.back().first
            b.pop_back()

    cdef void _region_refill(self, uint32_t slot) noexcept nogil:
        """The buffer and bound from a count of the rectangle's window messages."""
        cdef RegionSubC* s = &self.region[slot]
        cdef vector[pair[uint64_t, term_t]]* b = &self.region_buf[slot]
        cdef vector[pair[uint64_t, term_t]] keys
        cdef size_t i, n
        cdef term_t t
        self.qw.c_region_counts(&s.rect, 0.0, 0.0, &self.counts, &self.touched_terms)
        for i in range(self.touched_terms.size()):
            t = self.touched_terms[i]
            keys.push_back(rank_key(self.counts[t], self.labels[t], t))
            self.counts[t] = 0
        self.touched_terms.clear()
        n = min(keys.size(), <size_t>s.cap + 1)
        partial_sort(keys.begin(), keys.begin() + n, keys.end())
        b.clear()
        for i in range(min(n, <size_t>s.cap)):
            b.push_back(keys[i])
        s.bound = keys[s.cap].first if keys.size() > s.cap else 0xFFFFFFFFFFFFFFFFu
        for i in range(MEMO if self.region_memo.size() else 0):    # a remembered term may be in the buffer now
            self.region_memo[<size_t>slot * MEMO + i] = 0
        self.region_refills += 1

    cdef void _region_rank(self, uint32_t slot, vector[term_t]* out) noexcept nogil:
        """Top-k terms: the buffer's first k entries, once proven (else refilled first)."""
        cdef RegionSubC* s = &self.region[slot]
        cdef vector[pair[uint64_t, term_t]]* b = &self.region_buf[slot]
        cdef size_t i
        if s.bound != 0xFFFFFFFFFFFFFFFFu and (b.size() < s.k or b[0][s.k - 1].first >= s.bound):
            self._region_refill(slot)
        for i in range(min(<size_t>s.k, b.size())):
            out.push_back(b[0][i].second)

    def set_labels(self, const uint32_t[::1] labels, bint relabel):
        """Labels of the term ids 0.. (vocabulary ids; the core's are shifted by one).  With
        ``relabel`` existing labels changed: every terms subscription's set is rebuilt."""
        cdef Py_ssize_t i
        cdef size_t slot
        self.labels.resize(labels.shape[0] + 1, 0)
        for i in range(labels.shape[0]):
            self.labels[i + 1] = labels[i]
        if not relabel:
            return
        if self.blocks_on:
            self.blocks.c_relabel()
        for slot in range(self.region.size()):      # keys changed: buffers and bounds anew
            if self.region[slot].alive:
                self._region_refill(slot)

    cdef void _region_touch(self, uint32_t slot) noexcept nogil:
        if self.region_touch_step[slot] == self.step:
            return
        self.region_touch_step[slot] = self.step
        self.region_touched.push_back(slot)
        self.region_before[slot].swap(self.region_top[slot])   # region_top is rebuilt after the step's change

    def blocks_at(self, double x, double y):
        return self.blocks.blocks_at(x, y)

    def lane_state(self, uint32_t slot):
        """Design 3: a lane's theta, gate, bound, tracked counts and members (for tests)."""
        return self.blocks.lane_state(slot)

    def result(self, uint32_t slot):
        """(vocabulary term ids, counts) of a terms subscription's top-k."""
        if self.blocks_on:
            return self.blocks.result(slot)
        cdef vector[term_t]* top = &self.region_top[slot]
        cdef size_t i
        ids = np.empty(top.size(), dtype=np.int64)
        counts = np.empty(top.size(), dtype=np.int64)
        for i in range(top.size()):
            ids[i] = <int64_t>top[0][i] - 1
            counts[i] = key_count(self.region_buf[slot][i].first)
        return ids, counts

    # ------------------------------------------------------------------ the step's netting
    cdef void _terms_net(self, int64_t at) noexcept nogil:
        """The step's events: a term entered (in the top-k now, not before) or left."""
        if self.blocks_on:
            self.blocks.c_flush(at, self.out.at, self.out.sub, self.out.entry, self.out.entered)
            return
        cdef size_t i
        cdef uint32_t slot
        for i in range(self.region_touched.size()):
            slot = self.region_touched[i]
            if self.region_top[slot] != self.region_before[slot]:   # common: counts moved, not the top-k
                emit_set_changes(&self.region_top[slot], &self.region_before[slot], at, self.region[slot].ext_id,
                                 self.out.at, self.out.sub, self.out.entry, self.out.entered)
        self.region_touched.clear()

    def stats(self):
        return {"subscriptions": self.blocks.size() if self.blocks_on else self.regions.size(),
                "probed": self.regions.candidates,
                "blocks": self.blocks.stats() if self.blocks_on else None,
                "matches": self.matches, "count_updates": self.region_updates,
                "walks": self.region_walks, "walks_bounded": self.region_bounded,
                "walks_saved": self.region_memo_hits,
                "buffer_passes": self.region_scans, "reevaluations": self.region_refills,
                **self.grid_stats(), "net_s": self.net_ns / 1e9, "time_s": self.ns / 1e9}
