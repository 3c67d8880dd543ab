# cython: language_level=3
"""The continuous ``range`` kind: the messages of a rectangle that satisfy a predicate.

The :class:`KeywordRangeIndex` probe (``keyword``, the default; else the :class:`RectSubIndex`
grid) of a message gives exactly the subscriptions it matches.  It enters their results on
arrival; at expiry the *same probe* (the message's terms and location have not changed) gives
exactly the subscriptions it leaves, so the kind needs no netting and nothing after the pop.
A result is recomputed from the window when asked for (``result``), so nothing is stored per
(subscription, message).
"""
import numpy as np
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libcpp.functional cimport greater
from libc.stdint cimport int64_t, uint8_t, uint32_t
from skype._core.types cimport seq_t, RectC, MsgTermC
from skype._core.window cimport MsgC, win_get
from skype._core.querywindow cimport QueryWindow, ALL_TERM
from skype._core.rangeindex cimport RectSubIndex, RectSubC
from skype._core.kwrangeindex cimport KeywordRangeIndex
from skype._core.querykind cimport emit
from skype._core.predicate cimport OP_AND


cdef object range_answer(QueryWindow qw, const RectC* r, const int64_t* prog, int plen, const int64_t* cover,
                         int ncover, double now, double last):
    """Message ids of the window's messages in ``r`` that satisfy the predicate, newest first."""
    cdef vector[seq_t] seqs
    cdef size_t i, n
    cdef int64_t[::1] o
    with nogil:
        qw.c_range(r, prog, plen, cover, ncover, now, last, &seqs)
        std_sort(seqs.begin(), seqs.end(), greater[seq_t]())      # newest first
    n = seqs.size()
    ids = np.empty(n, dtype=np.int64)
    o = ids
    with nogil:
        for i in range(n):
            o[i] = win_get(qw.window, seqs[i]).ext_id
    return ids


cdef class RangeKind(QueryKind):
    def __cinit__(self, QueryWindow qw, uint32_t grid=64, bint keyword=True):
        cdef RectC b = qw.index.bounds
        self.qw = qw
        self.ranges = RectSubIndex(b.minx, b.miny, b.maxx, b.maxy, grid)
        self.kw_ranges = KeywordRangeIndex()
        self.keyword = keyword

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, int64_t ext_id, tuple rect, const int64_t[::1] prog, const int64_t[::1] cover):
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        cdef Py_ssize_t i
        cdef bint implied = True                 # no AND: every cover term satisfies the predicate
        if self.keyword:
            return self.kw_ranges.c_add(ext_id, &r, &prog[0] if prog.shape[0] else NULL, <int>prog.shape[0],
                                        &cover[0] if cover.shape[0] else NULL, <int>cover.shape[0])
        for i in range(prog.shape[0]):
            if prog[i] == OP_AND:
                implied = False
        return self.ranges.c_add(ext_id, &r, &prog[0] if prog.shape[0] else NULL, <int>prog.shape[0],
                                 &cover[0] if cover.shape[0] else NULL, <int>cover.shape[0], implied)

    def unsubscribe(self, uint32_t slot):
        if self.keyword:
            self.kw_ranges.c_remove(slot)
        else:
            self.ranges.c_remove(slot)

    def prepare(self):
        """Sort the subscription indexes' lists now (after a bulk registration)."""
        self.ranges.sort_all()
        self.kw_ranges.sort_all()

    # ------------------------------------------------------------------ the stream's hooks
    cdef void c_arrive(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil:
        self._probe(at, m.x, m.y, mt, m.nterms, m.ext_id, True)

    cdef void c_expire(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil:
        self._probe(at, m.x, m.y, mt, m.nterms, m.ext_id, False)

    cdef void _probe(self, int64_t at, double x, double y, const MsgTermC* mt, uint32_t nterms, int64_t msg,
                     bint entered) noexcept nogil:
        """The range subscriptions the message matches enter (arrival) or leave (expiry)."""
        cdef size_t i, n0 = self.out.sub.size(), k
        cdef uint8_t e = entered
        if self.keyword:                     # ids straight into the change log's columns
            k = self.kw_ranges.c_probe_ids(x, y, mt, nterms, self.out.sub)
            if k:
                self.out.at.resize(n0 + k, at)
                self.out.entry.resize(n0 + k, msg)
                self.out.entered.resize(n0 + k, e)
            self.matches += k
            return
        self.hits.clear()
        self.ranges.c_probe(x, y, mt, nterms, &self.hits)
        for i in range(self.hits.size()):
            emit(&self.out, at, self.ranges.hot[self.hits[i]].ext_id, msg, entered)
        self.matches += self.hits.size()

    # ------------------------------------------------------------------ results
    def result(self, uint32_t slot):
        """Message ids of a range subscription's current result, newest first."""
        cdef vector[int64_t]* kp
        if self.keyword:
            kp = &self.kw_ranges.progs[slot]
            return range_answer(self.qw, &self.kw_ranges.rects[slot], kp.data(), self.kw_ranges.plens[slot],
                                kp.data() + self.kw_ranges.plens[slot], self.kw_ranges.ncovers[slot], 0.0, 0.0)
        cdef RectSubC* s = &self.ranges.subs[slot]
        cdef vector[int64_t]* p = &self.ranges.progs[slot]
        cdef int ncover = <int>s.cover_len if p[0][s.cover_pos] != ALL_TERM or s.prog_len else 0
        return range_answer(self.qw, &s.rect, p.data(), s.prog_len, p.data() + s.cover_pos, ncover, 0.0, 0.0)

    def stats(self):
        return {"subscriptions": self.kw_ranges.size() if self.keyword else self.ranges.size(),
                "probed": self.kw_ranges.candidates if self.keyword else self.ranges.candidates,
                "matches": self.matches,
                "index": "keyword" if self.keyword else "grid", "grid_builds": self.kw_ranges.builds,
                "time_s": self.ns / 1e9}

    def postings(self):
        return self.kw_ranges.records if self.keyword else self.ranges.postings

    def candidates(self):
        return self.kw_ranges.candidates if self.keyword else self.ranges.candidates

    def memory_bytes(self):
        return (self.kw_ranges if self.keyword else self.ranges).memory_bytes()
