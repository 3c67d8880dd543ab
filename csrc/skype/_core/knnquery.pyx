# cython: language_level=3
"""The continuous ``knn`` kind: the k nearest window messages that satisfy a predicate.

:class:`KnnKind` is one of the kinds :class:`~skype._core.querycore.QueryCore` holds behind the
:class:`~skype._core.querykind.QueryKind` hooks: ``c_expire`` drops the expiring message from
the buffers and notes those to refill, ``c_expired`` refills them once the window has popped it,
``c_arrive`` offers the arrival, ``c_net`` nets the step's events.

A bounded buffer per subscription of capacity ``cap = knn_factor * k``, sorted by (distance,
newest first).  Invariant: the buffer is the exact prefix of the ranked matching window
messages, and it holds all of them when ``complete``; not complete implies at least k entries.
An arrival is inserted when it ranks before the buffer's last entry (or the buffer is
complete), the buffer truncated to ``cap``.  An expiring entry is removed; a buffer that drops
below k and is not complete is re-evaluated from the message index (a best-first kNN search for
``cap`` messages), after the message has left the window.  Candidates come from ``near``, a
:class:`RectSubIndex` in which each subscription is posted (with its predicate and cover terms)
under the box of its k-th distance circle: the last entry's distance, the whole plane while
complete.  Invariant: the posted box holds that circle.  Between refills the radius only
shrinks, so the box is kept; a refill that widens it grows the box in place
(``RectSubIndex.c_grow``: only the cells it gains are posted, in short sorted tails, so a
repost is not linear in the lists' lengths).  A probe gives
exactly the subscriptions whose box holds the message and whose predicate it satisfies; on
expiry the same probe reaches every buffer that may hold it.  (``knn_index=False``: per-term
lists of the cover terms instead.)

Events are netted per step without copying a top-k: every change of a buffer's first k
entries is one or two boundary crossings, logged with the message's id (``_knn_event``; an entry
holds its message's id, so no window read is needed): an insertion before position k enters the
new entry and pushes the k-th out; a removal before position k leaves the entry and pulls the
(k+1)-th in; a refill enters the entries it adds to the first k.  ``_knn_net`` sums the signs
per (subscription, message): +1 entered, -1 left, 0 nothing (left and came back, or the
reverse).  Work per step is proportional to the crossings, not to k.
"""
import numpy as np
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.stdint cimport int32_t, int64_t, uint32_t
from skype._core.types cimport term_t, seq_t, RectC, MsgTermC
from skype._core.window cimport MsgC, win_get
from skype._core.querywindow cimport QueryWindow, ALL_TERM
from skype._core.rangeindex cimport RectSubIndex
from skype._core.querykind cimport emit
from skype._core.predicate cimport eval_program, point_distance, OP_AND


cdef inline bint near_less(double d1, seq_t s1, double d2, seq_t s2) noexcept nogil:
    """(d1, s1) ranks before (d2, s2): nearer, then newer."""
    return d1 < d2 or (d1 == d2 and s1 > s2)


cdef bint event_before(const KnnEventC& a, const KnnEventC& b) noexcept nogil:
    """Events grouped by subscription, then message (each group's signs are summed)."""
    return a.slot < b.slot or (a.slot == b.slot and a.seq < b.seq)


cdef class KnnKind(QueryKind):
    def __cinit__(self, QueryWindow qw, uint32_t knn_factor=2, bint knn_index=True, uint32_t knn_grid=16):
        cdef RectC b = qw.index.bounds
        self.qw = qw
        self.knn_factor = knn_factor
        self.knn_index = knn_index
        self.near = RectSubIndex(b.minx, b.miny, b.maxx, b.maxy, knn_grid)
        self.knn_probes = 0

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, int64_t ext_id, double x, double y, uint32_t k, const int64_t[::1] prog,
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

    def unsubscribe(self, uint32_t slot):
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

    # ------------------------------------------------------------------ the stream's hooks
    cdef void c_arrive(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil:
        self._knn_arriving(m.x, m.y, m.seq, m.ext_id, mt, m.nterms)

    cdef void c_expire(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil:
        self._knn_expiring(m, mt, &self.refill)

    cdef void c_expired(self, int64_t at) noexcept nogil:
        self._knn_refilled(&self.refill)
        self.refill.clear()

    cdef void c_net(self, int64_t at) noexcept nogil:
        self._knn_net(at)

    cdef void _knn_arriving(self, double x, double y, seq_t seq, int64_t ext_id, const MsgTermC* mt,
                            uint32_t nterms) noexcept nogil:
        """Offer an arriving message to the buffers it may enter."""
        cdef size_t j
        cdef uint32_t slot, ti
        cdef term_t term
        self.knn_probes += 1
        if self.knn_index:                   # only subscriptions whose k-th distance it may beat
            self.near_hits.clear()
            self.near.c_probe(x, y, mt, nterms, &self.near_hits)
            for j in range(self.near_hits.size()):
                self._knn_offer(<uint32_t>self.near.hot[self.near_hits[j]].ext_id, x, y, seq, ext_id, mt, nterms,
                                True)
            return
        for ti in range(nterms):
            term = mt[ti].term
            if term >= self.knn_lists.size():
                continue
            for j in range(self.knn_lists[term].size()):
                slot = self.knn_lists[term][j]
                if self.knn_stamp[slot] == self.knn_probes:
                    continue
                self.knn_stamp[slot] = self.knn_probes
                self._knn_offer(slot, x, y, seq, ext_id, mt, nterms, False)

    cdef void _knn_expiring(self, const MsgC* m, const MsgTermC* mt, vector[uint32_t]* refill) noexcept nogil:
        """Drop the expiring (oldest) message from the buffers that may hold it; the slots that
        need a refill go to ``refill`` (refilled by ``_knn_refilled`` once it left the window)."""
        cdef size_t j
        cdef uint32_t slot, ti
        cdef term_t t
        self.knn_probes += 1
        if self.knn_index:                   # a buffered message lies in the posted box
            self.near_hits.clear()
            self.near.c_probe(m.x, m.y, mt, m.nterms, &self.near_hits)
            for j in range(self.near_hits.size()):
                slot = <uint32_t>self.near.hot[self.near_hits[j]].ext_id
                if self._knn_drop(slot, m.seq):
                    refill.push_back(slot)
            return
        for ti in range(m.nterms):
            t = mt[ti].term
            if t >= self.knn_lists.size():
                continue
            for j in range(self.knn_lists[t].size()):
                slot = self.knn_lists[t][j]
                if self.knn_stamp[slot] == self.knn_probes:
                    continue
                self.knn_stamp[slot] = self.knn_probes
                if self._knn_drop(slot, m.seq):
                    refill.push_back(slot)

    cdef void _knn_refilled(self, const vector[uint32_t]* refill) noexcept nogil:
        """Refill the buffers that fell below k.  Before it a buffer held fewer than k entries,
        all in its top-k, and they stay first (they are the ranking's prefix): the entries the
        refill adds before position k enter."""
        cdef size_t i, j, before
        cdef uint32_t slot
        cdef vector[NearEntryC]* b
        for i in range(refill.size()):
            slot = refill[0][i]
            before = self.knn_buf[slot].size()
            self._knn_refill(slot)
            b = &self.knn_buf[slot]
            for j in range(before, min(<size_t>self.knn[slot].k, b.size())):
                self._knn_event(slot, &b[0][j], 1)
            self._knn_post(slot)

    cdef void _knn_net(self, int64_t at) noexcept nogil:
        """The step's events: the crossings summed per (subscription, message); entered = in
        the top-k now and not before (+1), left = the reverse (-1)."""
        cdef size_t i = 0, j, n = self.knn_events.size()
        cdef int32_t total
        cdef KnnEventC* e
        if n == 0:
            return
        if n > 1:
            std_sort(self.knn_events.begin(), self.knn_events.end(), event_before)
        while i < n:
            e = &self.knn_events[i]
            total = e.sign
            j = i + 1
            while j < n and self.knn_events[j].slot == e.slot and self.knn_events[j].seq == e.seq:
                total += self.knn_events[j].sign
                j += 1
            if total:
                emit(&self.out, at, self.knn[e.slot].ext_id, e.ext_id, total > 0)
            i = j
        self.knn_events.clear()

    # ------------------------------------------------------------------ buffers
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
            e.ext_id = win_get(self.qw.window, e.seq).ext_id
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
        if r >= 1e300:
            box = RectC(-1e300, -1e300, 1e300, 1e300)
        else:
            pad = r * 1e-9 + 1e-9          # a distance <= r puts each coordinate inside, rounding included
            box = RectC(s.x - r - pad, s.y - r - pad, s.x + r + pad, s.y + r + pad)
        if s.posted >= 0.0:                # a wider radius: the box grows (monotone in r, rounding included)
            self.near.c_grow(s.post, &box)
            s.posted = r
            self.knn_posts += 1
            return
        for i in range(plen):
            if p[0][i] == OP_AND:
                implied = False
        s.post = self.near.c_add(<int64_t>slot, &box, p.data(), plen, p.data() + plen, <int>(p.size() - plen),
                                 implied)
        s.posted = r
        self.knn_posts += 1

    cdef void _knn_offer(self, uint32_t slot, double x, double y, seq_t seq, int64_t ext_id, const MsgTermC* mt,
                         uint32_t nterms, bint checked) noexcept nogil:
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
        e.dist = d
        e.seq = seq
        e.ext_id = ext_id
        if pos < s.k:                # after the k-th entry it leaves the top-k as it was
            self._knn_event(slot, &e, 1)
            if b.size() >= s.k:      # the k-th entry moves to position k
                self._knn_event(slot, &b[0][s.k - 1], -1)
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
                    self._knn_event(slot, &b[0][i], -1)
                    if b.size() > self.knn[slot].k:      # the (k+1)-th entry moves up to position k - 1
                        self._knn_event(slot, &b[0][self.knn[slot].k], 1)
                b.erase(b.begin() + i)
                return not self.knn[slot].complete and b.size() < self.knn[slot].k
        return False

    cdef void _knn_event(self, uint32_t slot, const NearEntryC* e, int32_t sign) noexcept nogil:
        cdef KnnEventC ev
        ev.slot = slot
        ev.sign = sign
        ev.seq = e.seq
        ev.ext_id = e.ext_id
        self.knn_events.push_back(ev)

    # ------------------------------------------------------------------ results
    def result(self, uint32_t slot):
        cdef vector[NearEntryC]* b = &self.knn_buf[slot]
        cdef size_t i, n = min(<size_t>self.knn[slot].k, b.size())
        ids = np.empty(n, dtype=np.int64)
        dist = np.empty(n, dtype=np.float64)
        for i in range(n):
            ids[i] = b[0][i].ext_id
            dist[i] = b[0][i].dist
        return ids, dist

    def stats(self):
        return {"subscriptions": self.knn.size() - self.knn_free.size(), "probed": self.knn_probed,
                "matches": self.knn_matches, "removed": self.knn_removed,
                "reevaluations": self.reevaluations, "index": bool(self.knn_index),
                "index_posts": self.knn_posts, "index_candidates": self.near.candidates,
                "index_grown": self.near.grown, "index_tail_merges": self.near.merges,
                "net_s": self.net_ns / 1e9, "time_s": self.ns / 1e9}
