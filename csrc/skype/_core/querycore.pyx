# cython: language_level=3
"""The continuous query kinds beside topk, over the query window (``querywindow.pyx``).

One step = one arriving message (or a clock advance): expirations first, then the arrival,
then the netted events of the step.

* ``range``: the :class:`RectSubIndex` probe of a message gives exactly the subscriptions it
  matches.  It enters their results on arrival; at expiry the *same probe* (the message's
  terms and location have not changed) gives exactly the subscriptions it leaves.  A result is
  recomputed from the window when asked for (``range_result``), so nothing is stored per
  (subscription, message).
* ``knn``: a bounded buffer per subscription of capacity ``cap = knn_factor * k``, sorted by
  (distance, newest first).  Invariant: the buffer is the exact prefix of the ranked matching
  window messages, and it holds all of them when ``complete``; not complete implies at least k
  entries.  An arrival is inserted when it ranks before the buffer's last entry (or the buffer
  is complete), the buffer truncated to ``cap``.  An expiring entry is removed; a buffer that
  drops below k and is not complete is re-evaluated from the message index (a best-first kNN
  search for ``cap`` messages).  Candidates come from ``near``, a :class:`RectSubIndex` in which
  each subscription is posted (with its predicate and cover terms) under the box of its k-th
  distance circle: the last entry's distance, the whole plane while complete.  Invariant: the
  posted box holds that circle.  Between refills the radius only shrinks, so the box is kept; a
  refill that widens it reposts the subscription.  A probe gives exactly the subscriptions whose
  box holds the message and whose predicate it satisfies; on expiry the same probe reaches every
  buffer that may hold it.  (``knn_index=False``: per-term lists of the cover terms instead.)
* ``terms``: counts are not kept per subscription.  The count of a term in a rectangle is read
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
* Events of knn and terms subscriptions are netted per step: their top-k before the step's
  first change to them is compared with the top-k after the step.

The snapshot queries are a subclass's (``querysnapshots.pyx``).
"""
import numpy as np
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libcpp.algorithm cimport partial_sort, sort as std_sort
from libcpp.functional cimport greater
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from skype._core.types cimport term_t, seq_t, RectC, MsgTermC
from skype._core.window cimport MsgC, win_get, win_terms, win_oldest
from skype._core.querywindow cimport QueryWindow, ALL_TERM
from skype._core.rangeindex cimport RectSubIndex, RectSubC
from skype._core.predicate cimport eval_program, point_distance, OP_AND


cdef inline double now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1e9 + ts.tv_nsec


cdef inline pair[uint64_t, term_t] rank_key(uint32_t count, uint32_t label, term_t t) noexcept nogil:
    """Ascending keys rank count descending, then name ascending (labels follow name order)."""
    return pair[uint64_t, term_t](((<uint64_t>(0xFFFFFFFFu - count)) << 32) | label, t)


cdef inline uint32_t key_count(uint64_t key) noexcept nogil:
    return 0xFFFFFFFFu - <uint32_t>(key >> 32)


cdef inline bint near_less(double d1, seq_t s1, double d2, seq_t s2) noexcept nogil:
    """(d1, s1) ranks before (d2, s2): nearer, then newer."""
    return d1 < d2 or (d1 == d2 and s1 > s2)


def _arr(vector[int64_t]& v):
    out = np.empty(v.size(), dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef size_t i
    for i in range(v.size()):
        o[i] = v[i]
    return out


cdef class QueryCore:
    def __cinit__(self, double minx, double miny, double maxx, double maxy, double max_dist,
                  uint64_t count_window, double time_window, uint32_t grid=64, uint32_t knn_factor=2,
                  uint32_t leaf_capacity=64, bint timers=True, bint knn_index=True,
                  uint32_t knn_grid=16):
        self.qw = QueryWindow(minx, miny, maxx, maxy, max_dist, count_window, time_window, leaf_capacity)
        self.ranges = RectSubIndex(minx, miny, maxx, maxy, grid)
        self.regions = RectSubIndex(minx, miny, maxx, maxy, grid)
        self.knn_factor = knn_factor
        self.knn_index = knn_index
        self.near = RectSubIndex(minx, miny, maxx, maxy, knn_grid)
        self.timers = timers
        self.step = 1                    # touch stamps start at 0: no slot is touched yet
        self.knn_probes = 0

    # ------------------------------------------------------------------ names
    def add_names(self, list names):
        self.qw.add_names(names)

    def name_count(self):
        return self.qw.name_count()

    # ------------------------------------------------------------------ subscriptions
    def subscribe_range(self, int64_t ext_id, tuple rect, const int64_t[::1] prog, const int64_t[::1] cover):
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        cdef Py_ssize_t i
        cdef bint implied = True                 # no AND: every cover term satisfies the predicate
        for i in range(prog.shape[0]):
            if prog[i] == OP_AND:
                implied = False
        return self.ranges.c_add(ext_id, &r, &prog[0] if prog.shape[0] else NULL, <int>prog.shape[0],
                                 &cover[0] if cover.shape[0] else NULL, <int>cover.shape[0], implied)

    def prepare(self):
        """Sort the subscription indexes' lists now (after a bulk registration)."""
        self.ranges.sort_all()
        self.regions.sort_all()

    def unsubscribe_range(self, uint32_t slot):
        self.ranges.c_remove(slot)

    def subscribe_knn(self, int64_t ext_id, double x, double y, uint32_t k, const int64_t[::1] prog,
                      const int64_t[::1] cover):
        cdef uint32_t slot, i
        cdef term_t t
        if self.knn_free.size():
            slot = self.knn_free.back()
            self.knn_free.pop_back()
        else:
            slot = <uint32_t>self.knn.size()
            self.knn.resize(slot + 1)
            self.knn_prog.resize(slot + 1)
            self.knn_plen.resize(slot + 1)
            self.knn_buf.resize(slot + 1)
            self.knn_stamp.resize(slot + 1, 0)
            self.knn_touch_step.resize(slot + 1, 0)
            self.knn_before.resize(slot + 1)
            self.knn_before_ids.resize(slot + 1)
        self.qw.c_need_term_trees()         # refills search them
        self.knn[slot] = KnnSubC(x, y, ext_id, k, k * self.knn_factor, 0, 1, 0, -1.0)
        self.knn_prog[slot].clear()
        for i in range(prog.shape[0]):
            self.knn_prog[slot].push_back(prog[i])
        self.knn_plen[slot] = prog.shape[0]
        for i in range(cover.shape[0]):
            self.knn_prog[slot].push_back(cover[i])
        for i in range(max(<uint32_t>cover.shape[0], 1)):
            if self.knn_index:
                break
            t = <term_t>cover[i] if cover.shape[0] else ALL_TERM
            if t >= self.knn_lists.size():
                self.knn_lists.resize(t + 1)
            self.knn_lists[t].push_back(slot)
        self._knn_refill(slot)
        self._knn_post(slot)
        return slot

    def unsubscribe_knn(self, uint32_t slot):
        cdef size_t i, j
        cdef uint32_t ncover = self.knn_prog[slot].size() - self.knn_plen[slot]
        cdef term_t t
        if self.knn[slot].posted >= 0.0:
            self.near.c_remove(self.knn[slot].post)
            self.knn[slot].posted = -1.0
        for i in range(max(ncover, 1)):
            if self.knn_index:
                break
            t = <term_t>self.knn_prog[slot][self.knn_plen[slot] + i] if ncover else ALL_TERM
            for j in range(self.knn_lists[t].size()):
                if self.knn_lists[t][j] == slot:
                    self.knn_lists[t][j] = self.knn_lists[t].back()
                    self.knn_lists[t].pop_back()
                    break
        self.knn[slot].alive = 0
        self.knn_buf[slot].clear()
        self.knn_free.push_back(slot)

    def subscribe_terms(self, int64_t ext_id, tuple rect, uint32_t k):
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        cdef uint32_t slot = self.regions.c_add(ext_id, &r, NULL, 0, NULL, 0, True)
        self.qw.c_need_term_trees()         # term counts in rectangles are read from them
        if slot >= self.region.size():
            self.region.resize(slot + 1)
            self.region_buf.resize(slot + 1)
            self.region_memo.resize((slot + 1) * MEMO, 0)
            self.region_top.resize(slot + 1)
            self.region_touch_step.resize(slot + 1, 0)
            self.region_before.resize(slot + 1)
        self.region[slot] = RegionSubC(r, ext_id, k, k * max(self.knn_factor, 2), 0xFFFFFFFFFFFFFFFFu, 1)
        self._region_refill(slot)
        self.region_top[slot].clear()
        self._region_rank(slot, &self.region_top[slot])
        return slot

    def unsubscribe_terms(self, uint32_t slot):
        self.regions.c_remove(slot)
        self.region[slot].alive = 0
        self.region_buf[slot].clear()
        self.region_buf[slot].shrink_to_fit()
        self.region_top[slot].clear()

    # ------------------------------------------------------------------ knn and terms state
    cdef void _knn_refill(self, uint32_t slot) noexcept nogil:
        cdef KnnSubC* s = &self.knn[slot]
        cdef vector[int64_t]* p = &self.knn_prog[slot]
        cdef uint32_t plen = self.knn_plen[slot]
        cdef int ncover = <int>(p.size() - plen)
        cdef size_t i
        cdef NearEntryC e
        self.seqs.clear()
        self.dists.clear()
        self.qw.c_knn(s.x, s.y, s.cap, p.data(), plen, p.data() + plen, ncover, 0.0, 0.0, &self.seqs, &self.dists)
        self.knn_buf[slot].clear()
        for i in range(self.seqs.size()):
            e.dist = self.dists[i]
            e.seq = self.seqs[i]
            self.knn_buf[slot].push_back(e)
        s.complete = self.seqs.size() < s.cap
        self.reevaluations += 1

    cdef void _knn_post(self, uint32_t slot) noexcept nogil:
        """Post the subscription in ``near`` with the box of its k-th distance circle (the whole
        plane while its buffer is complete), unless the box it is posted with already holds it:
        a radius only shrinks between refills, so a posted box stays a superset."""
        cdef KnnSubC* s = &self.knn[slot]
        cdef vector[NearEntryC]* b = &self.knn_buf[slot]
        cdef vector[int64_t]* p = &self.knn_prog[slot]
        cdef uint32_t plen = self.knn_plen[slot]
        cdef double r = 1e300, pad
        cdef RectC box
        cdef bint implied = True
        cdef uint32_t i
        if not self.knn_index:
            return
        if not s.complete and b.size():
            r = b.back().dist
        if s.posted >= 0.0 and r <= s.posted:
            return
        if s.posted >= 0.0:
            self.near.c_remove(s.post)
        if r >= 1e300:
            box = RectC(-1e300, -1e300, 1e300, 1e300)
        else:
            pad = r * 1e-9 + 1e-9          # a distance <= r puts each coordinate inside, rounding included
            box = RectC(s.x - r - pad, s.y - r - pad, s.x + r + pad, s.y + r + pad)
        for i in range(plen):
            if p[0][i] == OP_AND:
                implied = False
        s.post = self.near.c_add(<int64_t>slot, &box, p.data(), plen, p.data() + plen, <int>(p.size() - plen),
                                 implied)
        s.posted = r
        self.knn_posts += 1

    cdef void _knn_offer(self, uint32_t slot, double x, double y, seq_t seq, const MsgTermC* mt, uint32_t nterms,
                         bint checked) noexcept nogil:
        """An arriving message, its predicate already checked or not: into the buffer if it ranks."""
        cdef KnnSubC* s = &self.knn[slot]
        cdef vector[NearEntryC]* b = &self.knn_buf[slot]
        cdef double d = point_distance(s.x, s.y, x, y)     # the cheap test first: most are too far
        cdef size_t pos
        cdef NearEntryC e
        self.knn_probed += 1
        if not s.complete and (b.size() == 0 or not near_less(d, seq, b.back().dist, b.back().seq)):
            return
        if not checked and not eval_program(self.knn_prog[slot].data(), self.knn_plen[slot], mt, nterms,
                                            &self.qw.stack):
            return
        self.knn_matches += 1
        pos = b.size()
        while pos > 0 and near_less(d, seq, b[0][pos - 1].dist, b[0][pos - 1].seq):
            pos -= 1
        if pos < s.k:                # after the k-th entry it leaves the top-k as it was
            self._knn_touch(slot)
        e.dist = d
        e.seq = seq
        b.insert(b.begin() + pos, e)
        if b.size() > s.cap:
            b.pop_back()
            s.complete = False

    cdef bint _knn_drop(self, uint32_t slot, seq_t seq) noexcept nogil:
        """An expiring message leaves the buffer if there; True when the buffer needs a refill."""
        cdef vector[NearEntryC]* b = &self.knn_buf[slot]
        cdef size_t i
        self.knn_probed += 1
        for i in range(b.size()):
            if b[0][i].seq == seq:
                self.knn_removed += 1
                if i < self.knn[slot].k:
                    self._knn_touch(slot)
                b.erase(b.begin() + i)
                return not self.knn[slot].complete and b.size() < self.knn[slot].k
        return False

    cdef void _knn_touch(self, uint32_t slot) noexcept nogil:
        cdef size_t i
        cdef vector[NearEntryC]* b
        if self.knn_touch_step[slot] == self.step:
            return
        self.knn_touch_step[slot] = self.step
        self.knn_touched.push_back(slot)
        b = &self.knn_buf[slot]
        self.knn_before[slot].clear()
        self.knn_before_ids[slot].clear()
        for i in range(min(<size_t>self.knn[slot].k, b.size())):
            self.knn_before[slot].push_back(<int64_t>b[0][i].seq)
            self.knn_before_ids[slot].push_back(win_get(self.qw.window, b[0][i].seq).ext_id)

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
        cdef uint64_t mv = self.region_memo[mi]
        if <term_t>(mv >> 32) == t:
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
        self.region_walks += 1
        if n >= s.cap:           # a count below the last entry's ranks after it: a bound will do
            need = key_count(b.back().first)
        e = rank_key(self.qw.c_count_bounded(t, &s.rect, need), self.labels[t], t)
        if key_count(e.first) < need:
            self.region_bounded += 1
        if n >= s.cap and e.first >= b.back().first:
            if e.first < s.bound:
                s.bound = e.first
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
        for i in range(MEMO):            # a remembered term may be in the buffer now
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
        for slot in range(self.region.size()):      # keys changed: buffers and bounds anew
            if self.region[slot].alive:
                self._region_refill(slot)

    cdef void _region_touch(self, uint32_t slot) noexcept nogil:
        if self.region_touch_step[slot] == self.step:
            return
        self.region_touch_step[slot] = self.step
        self.region_touched.push_back(slot)
        self.region_before[slot].swap(self.region_top[slot])   # region_top is rebuilt after the step's change

    # ------------------------------------------------------------------ the stream
    cdef void _emit(self, int64_t at, int64_t sub, int64_t entry, bint entered) noexcept nogil:
        self.out_at.push_back(at)
        self.out_sub.push_back(sub)
        self.out_entry.push_back(entry)
        self.out_entered.push_back(entered)

    cdef void _expire_oldest(self, int64_t at) noexcept nogil:
        cdef MsgC* m = win_oldest(self.qw.window)
        cdef const MsgTermC* mt = win_terms(self.qw.window, m)
        cdef size_t i, j
        cdef uint32_t slot, ti
        cdef term_t t
        cdef vector[uint32_t] refill
        cdef double start = now_ns()
        cdef double t0 = start, t1
        self.hits.clear()
        self.ranges.c_probe(m.x, m.y, mt, m.nterms, &self.hits)
        for i in range(self.hits.size()):
            self._emit(at, self.ranges.hot[self.hits[i]].ext_id, m.ext_id, False)
        self.range_matches += self.hits.size()
        if self.timers:
            t1 = now_ns()
            self.range_ns += t1 - t0
            t0 = t1
        self.hits.clear()
        self.regions.c_probe(m.x, m.y, mt, m.nterms, &self.hits)
        self.terms_matches += self.hits.size()
        self._mark_terms(mt, m.nterms, 1)
        for i in range(self.hits.size()):
            slot = self.hits[i]
            self._region_touch(slot)
            self._region_message(slot, mt, m.nterms, -1)
        self._mark_terms(mt, m.nterms, 0)
        if self.timers:
            t1 = now_ns()
            self.terms_ns += t1 - t0
            t0 = t1
        self.knn_probes += 1
        if self.knn_index:                   # a buffered message lies in the posted box
            self.near_hits.clear()
            self.near.c_probe(m.x, m.y, mt, m.nterms, &self.near_hits)
            for j in range(self.near_hits.size()):
                slot = <uint32_t>self.near.hot[self.near_hits[j]].ext_id
                if self._knn_drop(slot, m.seq):
                    refill.push_back(slot)
        for ti in range(m.nterms):
            t = mt[ti].term
            if self.knn_index or t >= self.knn_lists.size():
                continue
            for j in range(self.knn_lists[t].size()):
                slot = self.knn_lists[t][j]
                if self.knn_stamp[slot] == self.knn_probes:
                    continue
                self.knn_stamp[slot] = self.knn_probes
                if self._knn_drop(slot, m.seq):
                    refill.push_back(slot)
        if self.timers:
            t1 = now_ns()
            self.knn_ns += t1 - t0
            t0 = t1
        self.qw.c_pop_oldest()                 # refills after the message has left the window
        if self.timers:
            t1 = now_ns()
            self.window_ns += t1 - t0
            t0 = t1
        for i in range(self.hits.size()):
            self.region_top[self.hits[i]].clear()
            self._region_rank(self.hits[i], &self.region_top[self.hits[i]])
        if self.timers:
            t1 = now_ns()
            self.terms_ns += t1 - t0
            t0 = t1
        for i in range(refill.size()):
            self._knn_refill(refill[i])
            self._knn_post(refill[i])
        if self.timers:
            t1 = now_ns()
            self.knn_ns += t1 - t0
        self.expirations += 1
        self.expiry_ns += now_ns() - start

    cdef void _arrive(self, int64_t at, int64_t ext_id, double x, double y, double t,
                      const uint32_t* terms, const double* w, int n) noexcept nogil:
        cdef double start = now_ns()
        cdef seq_t seq = self.qw.c_append(ext_id, x, y, t, terms, w, n)
        cdef MsgC* m = win_get(self.qw.window, seq)
        cdef const MsgTermC* mt = win_terms(self.qw.window, m)
        cdef size_t i, j
        cdef uint32_t slot, ti
        cdef term_t term
        cdef double t0 = now_ns(), t1
        if self.timers:
            self.window_ns += t0 - start      # the message into the window and its trees
        self.hits.clear()
        self.ranges.c_probe(x, y, mt, m.nterms, &self.hits)
        for i in range(self.hits.size()):
            self._emit(at, self.ranges.hot[self.hits[i]].ext_id, ext_id, True)
        self.range_matches += self.hits.size()
        if self.timers:
            t1 = now_ns()
            self.range_ns += t1 - t0
            t0 = t1
        self.hits.clear()
        self.regions.c_probe(x, y, mt, m.nterms, &self.hits)
        self.terms_matches += self.hits.size()
        self._mark_terms(mt, m.nterms, 1)
        for i in range(self.hits.size()):
            slot = self.hits[i]
            self._region_touch(slot)
            self._region_message(slot, mt, m.nterms, 1)
            self.region_top[slot].clear()
            self._region_rank(slot, &self.region_top[slot])
        self._mark_terms(mt, m.nterms, 0)
        if self.timers:
            t1 = now_ns()
            self.terms_ns += t1 - t0
            t0 = t1
        self.knn_probes += 1
        if self.knn_index:                   # only subscriptions whose k-th distance it may beat
            self.near_hits.clear()
            self.near.c_probe(x, y, mt, m.nterms, &self.near_hits)
            for j in range(self.near_hits.size()):
                self._knn_offer(<uint32_t>self.near.hot[self.near_hits[j]].ext_id, x, y, seq, mt, m.nterms, True)
        for ti in range(m.nterms):
            term = mt[ti].term
            if self.knn_index or term >= self.knn_lists.size():
                continue
            for j in range(self.knn_lists[term].size()):
                slot = self.knn_lists[term][j]
                if self.knn_stamp[slot] == self.knn_probes:
                    continue
                self.knn_stamp[slot] = self.knn_probes
                self._knn_offer(slot, x, y, seq, mt, m.nterms, False)
        if self.timers:
            self.knn_ns += now_ns() - t0
        self.arrivals += 1
        self.arrival_ns += now_ns() - start

    cdef void _flush(self, int64_t at) noexcept nogil:
        cdef size_t i, j, a, n
        cdef uint32_t slot
        cdef bint found
        cdef vector[NearEntryC]* b
        cdef vector[term_t]* top
        for i in range(self.knn_touched.size()):
            slot = self.knn_touched[i]
            b = &self.knn_buf[slot]
            n = min(<size_t>self.knn[slot].k, b.size())
            if n == self.knn_before[slot].size():     # the common case: the same top-k
                a = 0
                while a < n and <seq_t>self.knn_before[slot][a] == b[0][a].seq:
                    a += 1
                if a == n:
                    continue
            for a in range(n):                    # entered: in the top-k now, not before
                found = False
                for j in range(self.knn_before[slot].size()):
                    if <seq_t>self.knn_before[slot][j] == b[0][a].seq:
                        found = True
                        break
                if not found:
                    self._emit(at, self.knn[slot].ext_id, win_get(self.qw.window, b[0][a].seq).ext_id, True)
            for j in range(self.knn_before[slot].size()):   # left: before, not now
                found = False
                for a in range(n):
                    if <seq_t>self.knn_before[slot][j] == b[0][a].seq:
                        found = True
                        break
                if not found:
                    self._emit(at, self.knn[slot].ext_id, self.knn_before_ids[slot][j], False)
        for i in range(self.region_touched.size()):
            slot = self.region_touched[i]
            top = &self.region_top[slot]
            if top[0] == self.region_before[slot]:   # the common case: counts moved, not the top-k
                continue
            for a in range(top.size()):
                found = False
                for j in range(self.region_before[slot].size()):
                    if self.region_before[slot][j] == top[0][a]:
                        found = True
                        break
                if not found:
                    self._emit(at, self.region[slot].ext_id, <int64_t>top[0][a] - 1, True)
            for j in range(self.region_before[slot].size()):
                found = False
                for a in range(top.size()):
                    if self.region_before[slot][j] == top[0][a]:
                        found = True
                        break
                if not found:
                    self._emit(at, self.region[slot].ext_id, <int64_t>self.region_before[slot][j] - 1, False)
        self.knn_touched.clear()
        self.region_touched.clear()
        self.step += 1

    def _take_output(self):
        n = self.out_at.size()
        at = np.empty(n, dtype=np.int64)
        sub = np.empty(n, dtype=np.int64)
        entry = np.empty(n, dtype=np.int64)
        entered = np.empty(n, dtype=bool)
        cdef int64_t[::1] a = at, s = sub, m = entry
        cdef uint8_t[::1] e = entered.view(np.uint8)
        cdef size_t i
        for i in range(n):
            a[i] = self.out_at[i]
            s[i] = self.out_sub[i]
            m[i] = self.out_entry[i]
            e[i] = self.out_entered[i]
        self.out_at.clear()
        self.out_sub.clear()
        self.out_entry.clear()
        self.out_entered.clear()
        return at, sub, entry, entered

    def publish_batch(self, const int64_t[::1] ids, const double[::1] x, const double[::1] y,
                      const double[::1] t, const int64_t[::1] indptr, const uint32_t[::1] terms,
                      const double[::1] weights):
        """Messages in order (vocabulary term ids, ascending per row); returns the change log
        columns (at, subscription id, message id or term id, entered)."""
        cdef Py_ssize_t i, n = ids.shape[0]
        cdef const uint32_t* base = &terms[0] if terms.shape[0] else NULL
        cdef const double* wbase = &weights[0] if weights.shape[0] else NULL
        with nogil:
            for i in range(n):
                while self.qw.c_must_expire(t[i], True):
                    self._expire_oldest(i)
                self._arrive(i, ids[i], x[i], y[i], t[i], base + indptr[i], wbase + indptr[i],
                             <int>(indptr[i + 1] - indptr[i]))
                self._flush(i)
        return self._take_output()

    def advance(self, double t):
        with nogil:
            while self.qw.c_must_expire(t, False):
                self._expire_oldest(0)
            self._flush(0)
        return self._take_output()

    # ------------------------------------------------------------------ results
    def range_result(self, uint32_t slot):
        """Message ids of a range subscription's current result, newest first."""
        cdef RectSubC* s = &self.ranges.subs[slot]
        cdef vector[int64_t]* p = &self.ranges.progs[slot]
        cdef int ncover = <int>s.cover_len if p[0][s.cover_pos] != ALL_TERM or s.prog_len else 0
        return self._range(&s.rect, p.data(), s.prog_len, p.data() + s.cover_pos, ncover, 0.0, 0.0)

    def knn_result(self, uint32_t slot):
        cdef vector[NearEntryC]* b = &self.knn_buf[slot]
        cdef size_t i, n = min(<size_t>self.knn[slot].k, b.size())
        ids = np.empty(n, dtype=np.int64)
        dist = np.empty(n, dtype=np.float64)
        for i in range(n):
            ids[i] = win_get(self.qw.window, b[0][i].seq).ext_id
            dist[i] = b[0][i].dist
        return ids, dist

    def terms_result(self, uint32_t slot):
        """(vocabulary term ids, counts) of a terms subscription's top-k."""
        cdef vector[term_t]* top = &self.region_top[slot]
        cdef size_t i
        ids = np.empty(top.size(), dtype=np.int64)
        counts = np.empty(top.size(), dtype=np.int64)
        for i in range(top.size()):
            ids[i] = <int64_t>top[0][i] - 1
            counts[i] = key_count(self.region_buf[slot][i].first)
        return ids, counts

    # ------------------------------------------------------------------ a range answer (snapshots too)
    cdef object _range(self, const RectC* r, const int64_t* prog, int plen, const int64_t* cover, int ncover,
                       double now, double last):
        cdef vector[seq_t] seqs
        cdef size_t i, n
        cdef int64_t[::1] o
        with nogil:
            self.qw.c_range(r, prog, plen, cover, ncover, now, last, &seqs)
            std_sort(seqs.begin(), seqs.end(), greater[seq_t]())      # newest first
        n = seqs.size()
        ids = np.empty(n, dtype=np.int64)
        o = ids
        with nogil:
            for i in range(n):
                o[i] = win_get(self.qw.window, seqs[i]).ext_id
        return ids

    # ------------------------------------------------------------------ introspection
    def window_size(self):
        return self.qw.window.count

    def query_window(self):
        return self.qw

    def need_term_trees(self):
        self.qw.c_need_term_trees()

    def set_timers(self, bint on):
        """Time each kind's share of a step (a clock read per kind and step; on by default)."""
        self.timers = on

    def stats(self):
        return {
            "arrivals": self.arrivals, "expirations": self.expirations,
            "amp_us": self.arrival_ns / 1e3 / self.arrivals if self.arrivals else 0.0,
            "emp_us": self.expiry_ns / 1e3 / self.expirations if self.expirations else 0.0,
            "knn_reevaluations": self.reevaluations,
            "range_postings": self.ranges.postings, "range_candidates": self.ranges.candidates,
            "terms_candidates": self.regions.candidates, "terms_refills": self.region_refills,
            "terms_walks": self.region_walks,
            "kinds": {
                "range": {"subscriptions": self.ranges.size(), "probed": self.ranges.candidates,
                          "matches": self.range_matches, "time_s": self.range_ns / 1e9},
                "knn": {"subscriptions": self.knn.size() - self.knn_free.size(), "probed": self.knn_probed,
                        "matches": self.knn_matches, "removed": self.knn_removed,
                        "reevaluations": self.reevaluations, "index": bool(self.knn_index),
                        "index_posts": self.knn_posts, "index_candidates": self.near.candidates,
                        "time_s": self.knn_ns / 1e9},
                "terms": {"subscriptions": self.regions.size(), "probed": self.regions.candidates,
                          "matches": self.terms_matches, "count_updates": self.region_updates,
                          "walks": self.region_walks, "walks_bounded": self.region_bounded,
                          "walks_saved": self.region_memo_hits,
                          "buffer_passes": self.region_scans, "reevaluations": self.region_refills,
                          "time_s": self.terms_ns / 1e9},
            },
            "window_upkeep_s": self.window_ns / 1e9,   # the window's insertions and removals
            "timers": bool(self.timers),
            "range_index_bytes": self.ranges.memory_bytes(),
            "term_trees": bool(self.qw.term_trees),
        }
