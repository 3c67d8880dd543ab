# cython: language_level=3
"""Ranked retrieval over the window: what both message indexes share.

A query enumerates, for one subscription s, every window message sharing a term with s in exact
ranking order: score descending, then newer first.  A max-heap holds the index's groups of
entries, keyed by an upper bound of their messages' scores, and scored messages, keyed by their
exact score.  A message m is *designated* to the term t of s with the largest contribution
w(t,s)*w(t,m) (ties: the earlier term); it is scored and pushed only when reached through t's
entries, so it is reported once.  For entries of t with weight at most W, every message
designated to t satisfies

    TSim <= min(1, l * w(t,s) * W, w(t,s) * W + |s without t|)

(l = |s.terms|: each of the <= l shared terms contributes at most the designated one; and
Cauchy-Schwarz on the other terms), and SSim <= 1 - MINDIST(s, region)/MaxDist for a region
holding the entries' locations.  Group keys are that bound plus 1e-12 of slack for rounding; on
equal keys groups pop before messages.  Hence when a message pops, every message not yet
reported scores lower, or equal and older: the order is exact, and once the heap's top key is
below theta no message scoring >= theta remains.  Scores are computed with the same operations
as ``scoring.score_pair``.

The subclasses decide the groups: ``msgindex.MessageIndex`` (a quadtree per term, leaves sorted
by weight) and ``termlists.TermLists`` (a list per term in arrival order, in chunks).
"""
from libc.math cimport sqrt, INFINITY
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport seq_t, SubTermC, MsgTermC
from skype._core.window cimport MsgC, win_get, win_terms
from skype._core.scoring cimport combine, spatial_sim


cdef class WindowRanking:
    cdef void insert(self, seq_t seq) noexcept nogil:
        pass

    cdef void remove(self, seq_t seq) noexcept nogil:
        pass

    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil:
        self._begin(alpha, x, y, terms, n)

    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil:
        return False

    cdef void _begin(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil:
        """Reset the query state for subscription (alpha, x, y, terms)."""
        cdef int i, j
        cdef double rest
        self.q_alpha = alpha
        self.q_x = x
        self.q_y = y
        self.q_terms = terms
        self.q_n = n
        self.q_rest.resize(n)
        self.heap.clear()
        self.q_work = 0
        self.total_queries += 1
        for i in range(n):
            rest = 0.0
            for j in range(n):
                if j != i:
                    rest += terms[j].w * terms[j].w
            self.q_rest[i] = sqrt(rest)

    cdef double _text_bound(self, uint32_t qi, double w) noexcept nogil:
        """Upper bound of TSim for messages designated to query term qi whose weight is <= w."""
        cdef double a = self.q_terms[qi].w
        cdef double tub = self.q_n * a * w
        cdef double cs = a * w + self.q_rest[qi]
        if cs < tub:
            tub = cs
        if tub > 1.0:
            tub = 1.0
        return tub

    cdef void _push(self, double key, uint64_t tie, int32_t node, uint32_t cursor, uint32_t qterm) noexcept nogil:
        cdef HeapItemC item
        item.key = key
        item.tie = tie
        item.node = node
        item.cursor = cursor
        item.qterm = qterm
        item.ctx = 0
        self._push_item(item)

    cdef void _push_item(self, HeapItemC item) noexcept nogil:
        cdef size_t i, parent
        self.heap.push_back(item)
        i = self.heap.size() - 1
        while i > 0:
            parent = (i - 1) >> 1
            if not heap_before(&item, &self.heap[parent]):
                break
            self.heap[i] = self.heap[parent]
            i = parent
        self.heap[i] = item

    cdef HeapItemC _pop(self) noexcept nogil:
        cdef HeapItemC top = self.heap[0]
        cdef HeapItemC last = self.heap.back()
        cdef size_t i = 0, c, n
        self.heap.pop_back()
        n = self.heap.size()
        if n:
            while True:
                c = 2 * i + 1
                if c >= n:
                    break
                if c + 1 < n and heap_before(&self.heap[c + 1], &self.heap[c]):
                    c += 1
                if not heap_before(&self.heap[c], &last):
                    break
                self.heap[i] = self.heap[c]
                i = c
            self.heap[i] = last
        return top

    cdef double _offer(self, seq_t seq, uint32_t qterm) noexcept nogil:
        """Score message seq exactly and push it, if qterm is its designated query term; its score,
        or -INFINITY when it is not designated to qterm (nothing pushed)."""
        cdef MsgC* m = win_get(self.window, seq)
        cdef const MsgTermC* mt = win_terms(self.window, m)
        cdef int i = 0, j = 0, best = -1
        cdef double acc = 0.0, contrib, best_contrib = -1.0, score
        while i < self.q_n and j < <int>m.nterms:
            if self.q_terms[i].term == mt[j].term:
                contrib = self.q_terms[i].w * mt[j].w
                acc += contrib
                if contrib > best_contrib:
                    best_contrib = contrib
                    best = i
                i += 1
                j += 1
            elif self.q_terms[i].term < mt[j].term:
                i += 1
            else:
                j += 1
        if best != <int>qterm:
            return -INFINITY
        score = combine(self.q_alpha, spatial_sim(self.q_x, self.q_y, m.x, m.y, self.max_dist), acc)
        self._push(score, seq, -1, 0, 0)
        return score

    # ------------------------------------------------------------------ Python access
    def memory_bytes(self):
        return 0

    def stats(self):
        return {"entries": self.entry_count, "queries": self.total_queries, "query_work": self.total_work}
