# cython: language_level=3
"""The continuous query kinds beside topk, over the query window (``querywindow.pyx``).

:class:`QueryCore` runs the stream over sibling kinds, each its own module behind the
:class:`~skype._core.querykind.QueryKind` hooks: ``range`` (``rangequery.pyx``), ``knn``
(``knnquery.pyx``) and ``terms`` (``termsquery.pyx``).  It owns the query window and the change
log's columns, which every kind emits into.  One step = one arriving message (or a clock
advance):

* each expiring (oldest) message: every kind's ``c_expire`` while it is still in the window,
  the window pops it, then every kind's ``c_expired`` (``knn`` refills its buffers, ``terms``'
  designs 1/2 re-rank);
* the arrival: into the window, then every kind's ``c_arrive``;
* every kind's ``c_net``: the step's netted changes (``knn`` and ``terms``: a top-k before the
  step's first change to it against the top-k after the step; ``range`` emits as it probes).

The kinds are called in one order (range, knn, terms) in every phase; they share only the
window (read) and the change columns (appended), so the order fixes only the rows' order.

Timers (``timers``, on by default): ``arrival_ns`` (AMP), ``expiry_ns`` (EMP) and ``flush_ns``
(the netting) cover a step whole, so AMP + EMP + flush is the core's time per message; each
kind's ``ns`` (its netting included, also in its ``net_ns``) and ``window_ns`` split the three.

The snapshot queries are a subclass's (``querysnapshots.pyx``).
"""
import numpy as np
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport seq_t, MsgTermC, now_ns
from skype._core.window cimport MsgC, win_get, win_terms, win_oldest
from skype._core.querywindow cimport QueryWindow
from skype._core.querykind cimport ChangeColsC
from skype._core.rangequery cimport RangeKind
from skype._core.knnquery cimport KnnKind
from skype._core.termsquery cimport TermsKind


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
                  uint32_t knn_grid=16, bint range_keyword=True):
        cdef ChangeColsC out = ChangeColsC(&self.out_at, &self.out_sub, &self.out_entry, &self.out_entered)
        self.qw = QueryWindow(minx, miny, maxx, maxy, max_dist, count_window, time_window, leaf_capacity)
        self.range_kind = RangeKind(self.qw, grid, range_keyword)
        self.knn_kind = KnnKind(self.qw, knn_factor, knn_index, knn_grid)
        self.terms_kind = TermsKind(self.qw, grid, knn_factor)
        self.range_kind.c_attach(self.qw, out)
        self.knn_kind.c_attach(self.qw, out)
        self.terms_kind.c_attach(self.qw, out)
        self.timers = timers

    # ------------------------------------------------------------------ names
    def add_names(self, list names):
        self.qw.add_names(names)

    def name_count(self):
        return self.qw.name_count()

    def prepare(self):
        """Sort the subscription indexes' lists now (after a bulk registration)."""
        self.range_kind.prepare()
        self.knn_kind.prepare()
        self.terms_kind.prepare()

    # ------------------------------------------------------------------ the stream
    cdef double _lap(self, double* ns, double t0) noexcept nogil:
        """With timers: the time since t0 added to ``ns``; the clock now (t0 without timers)."""
        cdef double t1
        if not self.timers:
            return t0
        t1 = now_ns()
        ns[0] += t1 - t0
        return t1

    cdef void _expire_oldest(self, int64_t at) noexcept nogil:
        cdef MsgC* m = win_oldest(self.qw.window)
        cdef const MsgTermC* mt = win_terms(self.qw.window, m)
        cdef double start = now_ns()
        cdef double t0 = start
        self.range_kind.c_expire(at, m, mt)
        t0 = self._lap(&self.range_kind.ns, t0)
        self.knn_kind.c_expire(at, m, mt)
        t0 = self._lap(&self.knn_kind.ns, t0)
        self.terms_kind.c_expire(at, m, mt)
        t0 = self._lap(&self.terms_kind.ns, t0)
        if self.snap_grid_on:
            self.snap_grid.c_message(m.x, m.y, mt, m.nterms, -1)
        self.qw.c_pop_oldest()                 # the kinds' refills read the window without it
        t0 = self._lap(&self.window_ns, t0)
        self.range_kind.c_expired(at)
        t0 = self._lap(&self.range_kind.ns, t0)
        self.knn_kind.c_expired(at)
        t0 = self._lap(&self.knn_kind.ns, t0)
        self.terms_kind.c_expired(at)
        self._lap(&self.terms_kind.ns, t0)
        self.expirations += 1
        self.expiry_ns += now_ns() - start

    cdef void _arrive(self, int64_t at, int64_t ext_id, double x, double y, double t,
                      const uint32_t* terms, const double* w, int n) noexcept nogil:
        cdef double start = now_ns()
        cdef seq_t seq = self.qw.c_append(ext_id, x, y, t, terms, w, n)
        cdef MsgC* m = win_get(self.qw.window, seq)
        cdef const MsgTermC* mt = win_terms(self.qw.window, m)
        cdef double t0
        if self.snap_grid_on:
            self.snap_grid.c_message(x, y, mt, m.nterms, 1)
        t0 = now_ns()
        if self.timers:
            self.window_ns += t0 - start      # the message into the window and its trees
        self.range_kind.c_arrive(at, m, mt)
        t0 = self._lap(&self.range_kind.ns, t0)
        self.knn_kind.c_arrive(at, m, mt)
        t0 = self._lap(&self.knn_kind.ns, t0)
        self.terms_kind.c_arrive(at, m, mt)
        self._lap(&self.terms_kind.ns, t0)
        self.arrivals += 1
        self.arrival_ns += now_ns() - start

    cdef void _flush(self, int64_t at) noexcept nogil:
        """The step's netted changes.  Timed apart (``flush_ns``): a step costs its expiries
        (EMP), its arrival (AMP) and this; each kind's netting also counts in its own time."""
        cdef double start = now_ns() if self.timers else 0.0
        cdef double t0 = start, t1
        self.range_kind.c_net(at)              # range emits as it probes: nothing to net, untimed
        self.knn_kind.c_net(at)
        t1 = self._lap(&self.knn_kind.net_ns, t0)
        self.knn_kind.ns += t1 - t0
        t0 = t1
        self.terms_kind.c_net(at)
        t1 = self._lap(&self.terms_kind.net_ns, t0)
        self.terms_kind.ns += t1 - t0
        self.flushes += 1
        self.flush_ns += t1 - start

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
        kinds = {"range": self.range_kind.stats(), "knn": self.knn_kind.stats(), "terms": self.terms_kind.stats()}
        return {
            "arrivals": self.arrivals, "expirations": self.expirations,
            "amp_us": self.arrival_ns / 1e3 / self.arrivals if self.arrivals else 0.0,
            "emp_us": self.expiry_ns / 1e3 / self.expirations if self.expirations else 0.0,
            # the steps' netting, per step (a step = one arriving message or a clock advance)
            "flush_us": self.flush_ns / 1e3 / self.flushes if self.flushes else 0.0,
            "flushes": self.flushes, "flush_s": self.flush_ns / 1e9,
            "knn_reevaluations": kinds["knn"]["reevaluations"],
            "range_postings": self.range_kind.postings(),
            "range_candidates": self.range_kind.candidates(),
            "terms_candidates": kinds["terms"]["probed"], "terms_refills": kinds["terms"]["reevaluations"],
            "terms_walks": kinds["terms"]["walks"],
            "kinds": kinds,
            "window_upkeep_s": self.window_ns / 1e9,   # the window's insertions and removals
            "timers": bool(self.timers),
            "range_index_bytes": self.range_kind.memory_bytes(),
            "term_trees": bool(self.qw.term_trees),
        }
