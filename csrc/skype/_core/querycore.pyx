# cython: language_level=3
"""The continuous query kinds beside topk, over the query window (``querywindow.pyx``).

One step = one arriving message (or a clock advance): expirations first, then the arrival,
then the netted events of the step.

* ``range``: the :class:`KeywordRangeIndex` probe (``range_keyword``, the default; else the
  :class:`RectSubIndex` grid) of a message gives exactly the subscriptions it matches.  It
  enters their results on arrival; at expiry the *same probe* (the message's terms and location
  have not changed) gives exactly the subscriptions it leaves.  A result is recomputed from the
  window when asked for (``range_result``), so nothing is stored per (subscription, message).
* ``knn``: the base class :class:`~skype._core.knnquery.KnnCore` (``knnquery.pyx``): bounded
  buffers of the nearest matching messages, candidates from the ``near`` index of k-th distance
  boxes, refills from the message index.
* ``terms``: the base class :class:`~skype._core.termsquery.TermsCore` (``termsquery.pyx``):
  design 3 (the default): lanes in blocks of 64 with shared rows of exact counts and a threshold
  per lane (``termblocks.pyx``); design 1/2: per-subscription buffers of exact counts, a bound,
  bounded tree walks, remembered bounds.
* Events of knn and terms subscriptions are netted per step (``_knn_net``, ``_terms_net``):
  their top-k before the step's first change to them is compared with the top-k after the step.

Timers (``timers``, on by default): ``arrival_ns`` (AMP), ``expiry_ns`` (EMP) and ``flush_ns``
(the netting) cover a step whole, so AMP + EMP + flush is the core's time per message; the
per-kind times (``range_ns``, ``knn_ns``, ``terms_ns``, ``window_ns``) split the three, each
kind's netting included.

The snapshot queries are a subclass's (``querysnapshots.pyx``).
"""
import numpy as np
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libcpp.functional cimport greater
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport seq_t, RectC, MsgTermC, now_ns
from skype._core.window cimport MsgC, win_get, win_terms, win_oldest
from skype._core.querywindow cimport QueryWindow, ALL_TERM
from skype._core.rangeindex cimport RectSubIndex, RectSubC
from skype._core.kwrangeindex cimport KeywordRangeIndex
from skype._core.knnquery cimport KnnCore
from skype._core.predicate cimport OP_AND


def _arr(vector[int64_t]& v):
    out = np.empty(v.size(), dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef size_t i
    for i in range(v.size()):
        o[i] = v[i]
    return out


cdef class QueryCore(KnnCore):
    def __cinit__(self, double minx, double miny, double maxx, double maxy, double max_dist,
                  uint64_t count_window, double time_window, uint32_t grid=64, uint32_t knn_factor=2,
                  uint32_t leaf_capacity=64, bint timers=True, bint knn_index=True,
                  uint32_t knn_grid=16, bint range_keyword=True):
        self.qw = QueryWindow(minx, miny, maxx, maxy, max_dist, count_window, time_window, leaf_capacity)
        self.ranges = RectSubIndex(minx, miny, maxx, maxy, grid)
        self.kw_ranges = KeywordRangeIndex()
        self.range_keyword = range_keyword
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
        if self.range_keyword:
            return self.kw_ranges.c_add(ext_id, &r, &prog[0] if prog.shape[0] else NULL, <int>prog.shape[0],
                                        &cover[0] if cover.shape[0] else NULL, <int>cover.shape[0])
        for i in range(prog.shape[0]):
            if prog[i] == OP_AND:
                implied = False
        return self.ranges.c_add(ext_id, &r, &prog[0] if prog.shape[0] else NULL, <int>prog.shape[0],
                                 &cover[0] if cover.shape[0] else NULL, <int>cover.shape[0], implied)

    def prepare(self):
        """Sort the subscription indexes' lists now (after a bulk registration)."""
        self.ranges.sort_all()
        self.kw_ranges.sort_all()
        self.regions.sort_all()

    def unsubscribe_range(self, uint32_t slot):
        if self.range_keyword:
            self.kw_ranges.c_remove(slot)
        else:
            self.ranges.c_remove(slot)

    # ------------------------------------------------------------------ knn and terms state
    # ------------------------------------------------------------------ the stream
    cdef void _expire_oldest(self, int64_t at) noexcept nogil:
        cdef MsgC* m = win_oldest(self.qw.window)
        cdef const MsgTermC* mt = win_terms(self.qw.window, m)
        cdef size_t i
        cdef uint32_t slot
        cdef vector[uint32_t] refill
        cdef double start = now_ns()
        cdef double t0 = start, t1
        self._range_probe(at, m.x, m.y, mt, m.nterms, m.ext_id, False)
        if self.timers:
            t1 = now_ns()
            self.range_ns += t1 - t0
            t0 = t1
        self._terms_window(m.x, m.y, mt, m.nterms, -1)
        self.hits.clear()
        if self.blocks_on:                     # design 3: the blocks' rows, crossings noted
            self.blocks.c_event(m.x, m.y, mt, m.nterms, -1)
        else:
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
        self._knn_expiring(m, mt, &refill)
        if self.timers:
            t1 = now_ns()
            self.knn_ns += t1 - t0
            t0 = t1
        if self.snap_grid_on:
            self.snap_grid.c_message(m.x, m.y, mt, m.nterms, -1)
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
        self._knn_refilled(&refill)
        if self.timers:
            t1 = now_ns()
            self.knn_ns += t1 - t0
        self.expirations += 1
        self.expiry_ns += now_ns() - start

    cdef void _range_probe(self, int64_t at, double x, double y, const MsgTermC* mt, uint32_t nterms,
                           int64_t msg, bint entered) noexcept nogil:
        """The range subscriptions the message matches enter (arrival) or leave (expiry)."""
        cdef size_t i, n0 = self.out_sub.size(), k
        cdef uint8_t e = entered
        if self.range_keyword:               # ids straight into the change log's columns
            k = self.kw_ranges.c_probe_ids(x, y, mt, nterms, &self.out_sub)
            if k:
                self.out_at.resize(n0 + k, at)
                self.out_entry.resize(n0 + k, msg)
                self.out_entered.resize(n0 + k, e)
            self.range_matches += k
            return
        self.hits.clear()
        self.ranges.c_probe(x, y, mt, nterms, &self.hits)
        for i in range(self.hits.size()):
            self._emit(at, self.ranges.hot[self.hits[i]].ext_id, msg, entered)
        self.range_matches += self.hits.size()

    cdef void _arrive(self, int64_t at, int64_t ext_id, double x, double y, double t,
                      const uint32_t* terms, const double* w, int n) noexcept nogil:
        cdef double start = now_ns()
        cdef seq_t seq = self.qw.c_append(ext_id, x, y, t, terms, w, n)
        cdef MsgC* m = win_get(self.qw.window, seq)
        cdef const MsgTermC* mt = win_terms(self.qw.window, m)
        cdef size_t i
        cdef uint32_t slot
        cdef double t0, t1
        if self.snap_grid_on:
            self.snap_grid.c_message(x, y, mt, m.nterms, 1)
        t0 = now_ns()
        if self.timers:
            self.window_ns += t0 - start      # the message into the window and its trees
        self._range_probe(at, x, y, mt, m.nterms, ext_id, True)
        if self.timers:
            t1 = now_ns()
            self.range_ns += t1 - t0
            t0 = t1
        self._terms_window(x, y, mt, m.nterms, 1)
        self.hits.clear()
        if self.blocks_on:                     # design 3: the blocks' rows, crossings noted
            self.blocks.c_event(x, y, mt, m.nterms, 1)
        else:
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
        self._knn_arriving(x, y, seq, ext_id, mt, m.nterms)
        if self.timers:
            self.knn_ns += now_ns() - t0
        self.arrivals += 1
        self.arrival_ns += now_ns() - start

    cdef void _flush(self, int64_t at) noexcept nogil:
        """The step's netted events.  Timed apart (``flush_ns``): a step costs its expiries (EMP),
        its arrival (AMP) and this; each kind's netting also counts in its own time."""
        cdef double t0 = 0.0, t1, t2
        if self.timers:
            t0 = now_ns()
        self._knn_net(at)
        if self.timers:
            t1 = now_ns()
        self._terms_net(at)
        self.step += 1
        self.flushes += 1
        if self.timers:
            t2 = now_ns()
            self.knn_net_ns += t1 - t0
            self.terms_net_ns += t2 - t1
            self.knn_ns += t1 - t0
            self.terms_ns += t2 - t1
            self.flush_ns += t2 - t0

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
        cdef vector[int64_t]* kp
        if self.range_keyword:
            kp = &self.kw_ranges.progs[slot]
            return self._range(&self.kw_ranges.rects[slot], kp.data(), self.kw_ranges.plens[slot],
                               kp.data() + self.kw_ranges.plens[slot], self.kw_ranges.ncovers[slot], 0.0, 0.0)
        cdef RectSubC* s = &self.ranges.subs[slot]
        cdef vector[int64_t]* p = &self.ranges.progs[slot]
        cdef int ncover = <int>s.cover_len if p[0][s.cover_pos] != ALL_TERM or s.prog_len else 0
        return self._range(&s.rect, p.data(), s.prog_len, p.data() + s.cover_pos, ncover, 0.0, 0.0)

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
            # the steps' netting, per step (a step = one arriving message or a clock advance)
            "flush_us": self.flush_ns / 1e3 / self.flushes if self.flushes else 0.0,
            "flushes": self.flushes, "flush_s": self.flush_ns / 1e9,
            "knn_reevaluations": self.reevaluations,
            "range_postings": self.kw_ranges.records if self.range_keyword else self.ranges.postings,
            "range_candidates": self.kw_ranges.candidates if self.range_keyword else self.ranges.candidates,
            "terms_candidates": self.regions.candidates, "terms_refills": self.region_refills,
            "terms_walks": self.region_walks,
            "kinds": {
                "range": {"subscriptions": (self.kw_ranges if self.range_keyword else self.ranges).size(),
                          "probed": self.kw_ranges.candidates if self.range_keyword else self.ranges.candidates,
                          "matches": self.range_matches, "index": "keyword" if self.range_keyword else "grid",
                          "grid_builds": self.kw_ranges.builds, "time_s": self.range_ns / 1e9},
                "knn": {"subscriptions": self.knn.size() - self.knn_free.size(), "probed": self.knn_probed,
                        "matches": self.knn_matches, "removed": self.knn_removed,
                        "reevaluations": self.reevaluations, "index": bool(self.knn_index),
                        "index_posts": self.knn_posts, "index_candidates": self.near.candidates,
                        "index_grown": self.near.grown, "index_tail_merges": self.near.merges,
                        "net_s": self.knn_net_ns / 1e9, "time_s": self.knn_ns / 1e9},
                "terms": {"subscriptions": self.blocks.size() if self.blocks_on else self.regions.size(),
                          "probed": self.regions.candidates,
                          "blocks": self.blocks.stats() if self.blocks_on else None,
                          "matches": self.terms_matches, "count_updates": self.region_updates,
                          "walks": self.region_walks, "walks_bounded": self.region_bounded,
                          "walks_saved": self.region_memo_hits,
                          "buffer_passes": self.region_scans, "reevaluations": self.region_refills,
                          **self.terms_grid_stats(), "net_s": self.terms_net_ns / 1e9,
                          "time_s": self.terms_ns / 1e9},
            },
            "window_upkeep_s": self.window_ns / 1e9,   # the window's insertions and removals
            "timers": bool(self.timers),
            "range_index_bytes": (self.kw_ranges if self.range_keyword else self.ranges).memory_bytes(),
            "term_trees": bool(self.qw.term_trees),
        }
