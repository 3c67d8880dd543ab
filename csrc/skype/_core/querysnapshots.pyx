# cython: language_level=3
"""The snapshot queries (one-shot answers over the query window), beside the continuous kinds.

:class:`SnapshotCore` is :class:`~skype._core.querycore.QueryCore` with the four snapshot
entry points; the walks are the query window's (``querywindow.pyx``: cover-term trees for
``range``, best-first search for ``knn``, term 0's tree counted per term for ``terms``) and the
message index's best-first retrieval for ``topk``.  Each answer is exact and reads the window
as it is: nothing is kept between queries.  ``last`` > 0 keeps the messages with
``now - t < last`` (decided exactly).  A reader of per-term trees (``range`` and ``knn`` with
terms, ``topk``) has them built first when the window keeps only term 0's tree.
"""
import numpy as np
from libcpp.vector cimport vector
from libc.stdint cimport int64_t
from skype._core.types cimport term_t, seq_t, RectC, SubTermC
from skype._core.window cimport win_get
from skype._core.scoring cimport round_up
from skype._core.querycore cimport QueryCore


cdef class SnapshotCore(QueryCore):
    def snapshot_range(self, tuple rect, const int64_t[::1] prog, const int64_t[::1] cover, double now,
                       double last):
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        if cover.shape[0]:
            self.qw.c_need_term_trees()
        return self._range(&r, &prog[0] if prog.shape[0] else NULL, <int>prog.shape[0],
                           &cover[0] if cover.shape[0] else NULL, <int>cover.shape[0], now, last)

    def snapshot_knn(self, double x, double y, size_t k, const int64_t[::1] prog, const int64_t[::1] cover,
                     double now, double last):
        cdef vector[seq_t] seqs
        cdef vector[double] dists
        cdef size_t i
        with nogil:
            self.qw.c_knn(x, y, k, &prog[0] if prog.shape[0] else NULL, <int>prog.shape[0],
                          &cover[0] if cover.shape[0] else NULL, <int>cover.shape[0], now, last, &seqs, &dists)
        ids = np.empty(seqs.size(), dtype=np.int64)
        dist = np.empty(seqs.size(), dtype=np.float64)
        cdef int64_t[::1] o = ids
        cdef double[::1] d = dist
        for i in range(seqs.size()):
            o[i] = win_get(self.qw.window, seqs[i]).ext_id
            d[i] = dists[i]
        return ids, dist

    def snapshot_terms(self, tuple rect, size_t k, double now, double last):
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        cdef vector[term_t] top
        cdef size_t i
        with nogil:
            self.qw.c_region_counts(&r, now, last, &self.counts, &self.touched_terms)
        counts_of = {}
        for i in range(self.touched_terms.size()):
            counts_of[self.touched_terms[i]] = self.counts[self.touched_terms[i]]
        with nogil:
            self.qw.c_top_terms(&self.counts, &self.touched_terms, k, &top)
        ids = np.array([<int64_t>top[i] - 1 for i in range(top.size())], dtype=np.int64)
        counts = np.array([counts_of[top[i]] for i in range(top.size())], dtype=np.int64)
        return ids, counts

    def snapshot_topk(self, double x, double y, size_t k, double alpha, const int64_t[::1] term_ids,
                      const double[::1] weights, double now, double last):
        """Skype's ranking over the window for an ad hoc query, from the message index."""
        cdef vector[SubTermC] q
        cdef Py_ssize_t i, n = term_ids.shape[0]
        cdef double suffix = 0.0
        cdef seq_t seq
        cdef double score
        cdef vector[seq_t] seqs
        cdef vector[double] scores
        q.resize(n)
        for i in range(n - 1, -1, -1):
            suffix += weights[i]
            q[i].term = <term_t>(term_ids[i] + 1)
            q[i].w = weights[i]
            q[i].wtsum = round_up(suffix)
        with nogil:
            if n and k:
                self.qw.c_need_term_trees()
                self.qw.index.query_start(alpha, x, y, q.data(), <int>n)
                while seqs.size() < k and self.qw.index.query_next(&seq, &score):
                    if self.qw.c_fresh(win_get(self.qw.window, seq), now, last):
                        seqs.push_back(seq)
                        scores.push_back(score)
        ids = np.empty(seqs.size(), dtype=np.int64)
        out = np.empty(seqs.size(), dtype=np.float64)
        for i in range(<Py_ssize_t>seqs.size()):
            ids[i] = win_get(self.qw.window, seqs[i]).ext_id
            out[i] = scores[i]
        return ids, out
