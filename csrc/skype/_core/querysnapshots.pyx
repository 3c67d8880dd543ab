# cython: language_level=3
"""The snapshot queries (one-shot answers over the query window), beside the continuous kinds.

:class:`SnapshotCore` is :class:`~skype._core.querycore.QueryCore` with the four snapshot
entry points; the walks are the query window's (``querywindow.pyx``: cover-term trees for
``range``, best-first search for ``knn``, term 0's tree counted per term for ``terms``) and the
message index's best-first retrieval for ``topk``.  Each answer is exact and reads the window
as it is: nothing is kept between queries but the count tables of ``terms`` (below).
``last`` > 0 keeps the messages with ``now - t < last`` (decided exactly).  A reader of
per-term trees (``range`` and ``knn`` with terms, ``topk``) has them built first when the
window keeps only term 0's tree.

``terms`` without ``last`` reads shared counts instead of every message of the rectangle: a
:class:`~skype._core.termgrid.TermGrid` of the whole window (``snap_cells`` per side; a table of
per-cell prefix sums for each term with at least ``snap_create_at`` window messages), built at
the first such query and kept by the stream from then on.  Terms are visited in decreasing
window count (a heap over the tables' dense counts); a term's count over the cells the
rectangle meets bounds its count in it (four reads), and only a term whose bound reaches the
current k-th count is counted exactly (its tree's bounded walk, ``c_count_bounded``).  The visit
stops at the first window count below the k-th count.  A term without a table has fewer than
``snap_create_at`` window messages, so the answer is certified when the k-th count is at least
that; otherwise (small rectangles, fewer than k terms) the rectangle's messages are counted as
before.
Exact either way, ties by name included (the final order is ``c_top_terms``').
"""
import numpy as np
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libcpp.queue cimport priority_queue
from libcpp.algorithm cimport make_heap, pop_heap
from libc.stdint cimport int64_t, uint32_t, uint64_t
from skype._core.termgrid cimport TermGrid, CellRangeC
from skype._core.types cimport term_t, seq_t, RectC, SubTermC, now_ns
from skype._core.window cimport win_get
from skype._core.scoring cimport round_up
from skype._core.querycore cimport QueryCore
from skype._core.rangequery cimport range_answer


cdef class SnapshotCore(QueryCore):
    cdef uint32_t snap_cells, snap_create_at, snap_drop_below   # snapshot terms' grid (0 cells: off)
    cdef uint64_t snap_terms_fast, snap_terms_scans, snap_terms_walks, snap_terms_visits
    cdef double snap_walk_ns, snap_fast_ns
    cdef vector[uint32_t] snap_counts      # scratch counts of a rectangle's terms, by term
    cdef vector[term_t] snap_touched

    def set_snapshot_grid(self, uint32_t cells, uint32_t create_at=32, uint32_t drop_below=16):
        """The snapshot ``terms`` query's count tables (``cells`` per side, 0: count every
        message of the rectangle); before the first such query only."""
        self.snap_cells = cells
        self.snap_create_at = create_at
        self.snap_drop_below = drop_below

    def snapshot_stats(self):
        return {"terms_fast": self.snap_terms_fast, "terms_scans": self.snap_terms_scans,
                "terms_walks": self.snap_terms_walks, "terms_walk_s": self.snap_walk_ns / 1e9,
                "terms_fast_s": self.snap_fast_ns / 1e9, "terms_visits": self.snap_terms_visits,
                "topk_work": self.qw.index.total_work,    # heap pops of the best-first retrievals
                "topk_reads": self.qw.index.total_reads,  # messages they read and scored
                "topk_entry_bounds": self.qw.index.total_entry_bounds,
                "grid": self.snap_grid.stats() if self.snap_grid_on else None}

    cdef bint _terms_top_fast(self, const RectC* r, size_t k) noexcept nogil:
        """The exact counts of every term that may be among the k best, into ``counts`` and
        ``touched_terms``; False (nothing left there) when a term without a table could be."""
        cdef CellRangeC cells = self.snap_grid.c_cells(r)
        cdef vector[pair[uint32_t, uint32_t]] order        # (window count, table), a max-heap
        cdef priority_queue[uint32_t] best                   # 0xFFFFFFFF - count of the k best
        cdef size_t s, end
        cdef uint32_t ub, c, need
        cdef term_t t
        cdef double t0
        for s in range(self.snap_grid.count_of.size()):
            if self.snap_grid.count_of[s]:
                order.push_back(pair[uint32_t, uint32_t](self.snap_grid.count_of[s], <uint32_t>s))
        make_heap(order.begin(), order.end())
        end = order.size()
        while end > 0:
            pop_heap(order.begin(), order.begin() + end)
            end -= 1
            need = 0xFFFFFFFFu - best.top() if best.size() == k else 1
            if order[end].first < need:                      # no term left can reach the k-th count
                break
            t = self.snap_grid.term_of[order[end].second]
            self.snap_terms_visits += 1
            self.snap_grid.c_upper(t, &cells, &ub)
            if ub < need:
                continue
            self.snap_terms_walks += 1
            t0 = now_ns()
            c = self.qw.c_count_bounded(t, r, need)
            self.snap_walk_ns += now_ns() - t0
            if c < need:
                continue
            if t >= self.snap_counts.size():
                self.snap_counts.resize(t + 1, 0)
            self.snap_counts[t] = c
            self.snap_touched.push_back(t)
            best.push(0xFFFFFFFFu - c)
            if best.size() > k:
                best.pop()
        if best.size() == k and 0xFFFFFFFFu - best.top() >= self.snap_grid.create_at:
            return True
        for s in range(self.snap_touched.size()):
            self.snap_counts[self.snap_touched[s]] = 0
        self.snap_touched.clear()
        return False

    def snapshot_range(self, tuple rect, const int64_t[::1] prog, const int64_t[::1] cover, double now,
                       double last):
        cdef RectC r = RectC(rect[0], rect[1], rect[2], rect[3])
        if cover.shape[0]:
            self.qw.c_need_term_trees()
        return range_answer(self.qw, &r, &prog[0] if prog.shape[0] else NULL, <int>prog.shape[0],
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
        cdef bint fast = False
        cdef double t_start
        cdef RectC b
        if last <= 0.0 and k > 0 and self.snap_cells:
            if not self.snap_grid_on:
                b = self.qw.index.bounds
                self.snap_grid = TermGrid(self.qw, b.minx, b.miny, b.maxx, b.maxy, self.snap_cells,
                                          self.snap_create_at, self.snap_drop_below)
                self.snap_grid_on = True
            with nogil:
                t_start = now_ns()
                fast = self._terms_top_fast(&r, k)
                self.snap_fast_ns += now_ns() - t_start
        if fast:
            self.snap_terms_fast += 1
        else:
            self.snap_terms_scans += 1
            with nogil:
                self.qw.c_region_counts(&r, now, last, &self.snap_counts, &self.snap_touched)
        counts_of = {}
        for i in range(self.snap_touched.size()):
            counts_of[self.snap_touched[i]] = self.snap_counts[self.snap_touched[i]]
        with nogil:
            self.qw.c_top_terms(&self.snap_counts, &self.snap_touched, k, &top)
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
                if last <= 0.0:                  # the first k messages are the answer: a floor prunes
                    self.qw.index.query_floor(<uint32_t>k)
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
