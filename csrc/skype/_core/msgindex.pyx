# cython: language_level=3
"""Message index: the window's messages in one quadtree per term, for best-first retrieval.

Structure.  For every term t, the window messages that contain t sit in a quadtree over the
space; a leaf holds at most ``leaf_capacity`` entries (seq, w) sorted by w descending, where w is
the message's weight for t rounded up to float.  Every node keeps ``maxw``, the exact maximum w
over its subtree (maintained on insert and on delete), and ``count``.  Underfull subtrees are
collapsed back into a leaf.

Retrieval.  ``query_start``/``query_next`` enumerate, for one subscription s, every window
message sharing a term with s in exact ranking order: score descending, then newer first.  A
max-heap holds tree nodes, leaf cursors and scored messages.  A message m is *designated* to the
term t of s with the largest contribution w(t,s)*w(t,m) (ties: the earlier term); it is scored
and pushed only when reached through t's tree, so it is reported once.  For a node of t's tree
with max weight W, every message designated to t satisfies

    TSim <= min(1, l * w(t,s) * W, w(t,s) * W + |s without t|)

(l = |s.terms|: each of the <= l shared terms contributes at most the designated one; and
Cauchy-Schwarz on the other terms), and SSim <= 1 - MINDIST(s, node)/MaxDist.  Node and cursor
keys are that bound plus 1e-12 of slack for rounding; on equal keys nodes pop before messages.
Hence when a message pops, every message not yet reported scores lower, or equal and older:
the order is exact, and once the heap's top key is below theta no message scoring >= theta
remains.  Scores are computed with the same operations as ``scoring.score_pair``.
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.math cimport sqrt
from libc.stdint cimport int32_t, uint32_t, uint64_t, UINT64_MAX
from skype._core.types cimport term_t, seq_t, RectC, SubTermC, MsgTermC
from skype._core.window cimport WindowStore, MsgC, win_get, win_terms
from skype._core.scoring cimport mindist, combine, spatial_sim, quadrant, child_rect, round_up

cdef double BOUND_SLACK = 1e-12


cdef inline bint heap_before(const HeapItemC* a, const HeapItemC* b) noexcept nogil:
    """True when a must pop before b."""
    return a.key > b.key or (a.key == b.key and a.tie > b.tie)


cdef bint entry_heavier(const MEntryC& a, const MEntryC& b) noexcept nogil:
    return a.w > b.w


cdef class MessageIndex:
    def __cinit__(self, WindowStore window, double minx, double miny, double maxx, double maxy,
                  double max_dist, uint32_t leaf_capacity=64, uint32_t max_depth=20):
        self.window = window
        self.bounds = RectC(minx, miny, maxx, maxy)
        self.max_dist = max_dist
        self.leaf_capacity = leaf_capacity
        self.max_depth = max_depth
        self.entry_count = 0
        self.total_queries = 0
        self.total_work = 0

    # ------------------------------------------------------------------ node pool
    cdef int32_t _new_root(self) noexcept nogil:
        cdef int32_t n
        if self.free_roots.size():
            n = self.free_roots.back()
            self.free_roots.pop_back()
        else:
            n = <int32_t>self.nodes.size()
            self.nodes.resize(n + 1)
            self.entries.resize(n + 1)
        self.nodes[n].rect = self.bounds
        self.nodes[n].child = -1
        self.nodes[n].parent = -1
        self.nodes[n].count = 0
        self.nodes[n].depth = 0
        self.nodes[n].maxw = 0
        return n

    cdef int32_t _new_block(self) noexcept nogil:
        cdef int32_t first
        if self.free_blocks.size():
            first = self.free_blocks.back()
            self.free_blocks.pop_back()
        else:
            first = <int32_t>self.nodes.size()
            self.nodes.resize(first + 4)
            self.entries.resize(first + 4)
        return first

    cdef void _split(self, int32_t n) noexcept nogil:
        cdef int32_t first = self._new_block(), c
        cdef int q
        cdef vector[MEntryC] moved
        cdef size_t i
        cdef MsgC* m
        moved.swap(self.entries[n])
        for q in range(4):
            c = first + q
            child_rect(&self.nodes[n].rect, q, &self.nodes[c].rect)
            self.nodes[c].child = -1
            self.nodes[c].parent = n
            self.nodes[c].count = 0
            self.nodes[c].depth = self.nodes[n].depth + 1
            self.nodes[c].maxw = 0
            self.entries[c].clear()
        for i in range(moved.size()):              # stays sorted: moved is sorted by w desc
            m = win_get(self.window, moved[i].seq)
            c = first + quadrant(&self.nodes[n].rect, m.x, m.y)
            if self.entries[c].size() == 0:
                self.nodes[c].maxw = moved[i].w
            self.entries[c].push_back(moved[i])
            self.nodes[c].count += 1
        self.nodes[n].child = first

    cdef void _gather(self, int32_t n, vector[MEntryC]* out) noexcept nogil:
        """Move every entry of n's subtree into out and free n's descendants."""
        cdef int q
        cdef int32_t first = self.nodes[n].child
        cdef size_t i
        if first < 0:
            for i in range(self.entries[n].size()):
                out.push_back(self.entries[n][i])
            self.entries[n].clear()
            return
        for q in range(4):
            self._gather(first + q, out)
        self.free_blocks.push_back(first)
        self.nodes[n].child = -1

    cdef void _collapse(self, int32_t n) noexcept nogil:
        cdef vector[MEntryC] all_entries
        self._gather(n, &all_entries)
        std_sort(all_entries.begin(), all_entries.end(), entry_heavier)
        self.entries[n].swap(all_entries)
        self.nodes[n].maxw = self.entries[n][0].w if self.entries[n].size() else 0

    # ------------------------------------------------------------------ updates
    cdef void insert(self, seq_t seq) noexcept nogil:
        cdef MsgC* m = win_get(self.window, seq)
        cdef const MsgTermC* terms = win_terms(self.window, m)
        cdef uint32_t j
        cdef term_t t
        cdef int32_t n
        cdef MEntryC e
        cdef size_t pos
        for j in range(m.nterms):
            t = terms[j].term
            if t >= self.root.size():
                self.root.resize(t + 1, -1)
            if self.root[t] < 0:
                n = self._new_root()
                self.root[t] = n
            n = self.root[t]
            e.seq = seq
            e.w = round_up(terms[j].w)
            while True:
                self.nodes[n].count += 1
                if e.w > self.nodes[n].maxw:
                    self.nodes[n].maxw = e.w
                if self.nodes[n].child < 0:
                    break
                n = self.nodes[n].child + quadrant(&self.nodes[n].rect, m.x, m.y)
            pos = self.entries[n].size()
            while pos > 0 and self.entries[n][pos - 1].w < e.w:
                pos -= 1
            self.entries[n].insert(self.entries[n].begin() + pos, e)
            self.entry_count += 1
            if self.entries[n].size() > self.leaf_capacity and self.nodes[n].depth < self.max_depth:
                self._split(n)

    cdef void remove(self, seq_t seq) noexcept nogil:
        """Remove a message (still in the window store) from every tree it is in."""
        cdef MsgC* m = win_get(self.window, seq)
        cdef const MsgTermC* terms = win_terms(self.window, m)
        cdef uint32_t j
        cdef term_t t
        cdef int32_t n, p, top
        cdef size_t i
        cdef float mx
        cdef int q
        for j in range(m.nterms):
            t = terms[j].term
            n = self.root[t]
            while True:
                self.nodes[n].count -= 1
                if self.nodes[n].child < 0:
                    break
                n = self.nodes[n].child + quadrant(&self.nodes[n].rect, m.x, m.y)
            for i in range(self.entries[n].size()):
                if self.entries[n][i].seq == seq:
                    self.entries[n].erase(self.entries[n].begin() + i)
                    break
            self.entry_count -= 1
            self.nodes[n].maxw = self.entries[n][0].w if self.entries[n].size() else 0
            # refresh maxw up the path; find the highest underfull ancestor to collapse
            top = -1
            p = self.nodes[n].parent
            while p >= 0:
                mx = 0
                for q in range(4):
                    if self.nodes[self.nodes[p].child + q].maxw > mx:
                        mx = self.nodes[self.nodes[p].child + q].maxw
                self.nodes[p].maxw = mx
                if self.nodes[p].count <= self.leaf_capacity // 2:
                    top = p
                p = self.nodes[p].parent
            if top >= 0:
                self._collapse(top)
            n = self.root[t]
            if self.nodes[n].count == 0:
                self._collapse(n)
                self.free_roots.push_back(n)
                self.root[t] = -1

    # ------------------------------------------------------------------ best-first retrieval
    cdef inline double _bound(self, int32_t n, uint32_t qi, float w) noexcept nogil:
        cdef double a = self.q_terms[qi].w
        cdef double tub = self.q_n * a * w
        cdef double cs = a * w + self.q_rest[qi]
        if cs < tub:
            tub = cs
        if tub > 1.0:
            tub = 1.0
        return combine(self.q_alpha, 1.0 - mindist(&self.nodes[n].rect, self.q_x, self.q_y) / self.max_dist,
                       tub) + BOUND_SLACK

    cdef void _push(self, double key, uint64_t tie, int32_t node, uint32_t cursor, uint32_t qterm) noexcept nogil:
        cdef HeapItemC item
        cdef size_t i, parent
        item.key = key
        item.tie = tie
        item.node = node
        item.cursor = cursor
        item.qterm = qterm
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

    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil:
        cdef int i, j
        cdef double rest
        cdef term_t t
        cdef int32_t r
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
            t = terms[i].term
            if t < self.root.size() and self.root[t] >= 0:
                r = self.root[t]
                self._push(self._bound(r, i, self.nodes[r].maxw), UINT64_MAX, r, 0, i)

    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil:
        cdef HeapItemC item
        cdef int32_t n, c
        cdef int q, i, j, best
        cdef MsgC* m
        cdef const MsgTermC* mt
        cdef double acc, contrib, best_contrib
        cdef vector[MEntryC]* leaf
        cdef MEntryC e
        while self.heap.size():
            item = self._pop()
            self.q_work += 1
            self.total_work += 1
            if item.node < 0:
                seq[0] = item.tie
                score[0] = item.key
                return True
            n = item.node
            if self.nodes[n].child >= 0:
                for q in range(4):
                    c = self.nodes[n].child + q
                    if self.nodes[c].count:
                        self._push(self._bound(c, item.qterm, self.nodes[c].maxw), UINT64_MAX, c, 0, item.qterm)
                continue
            leaf = &self.entries[n]
            if item.cursor >= leaf.size():
                continue
            e = leaf[0][item.cursor]
            if item.cursor + 1 < leaf.size():
                self._push(self._bound(n, item.qterm, leaf[0][item.cursor + 1].w), UINT64_MAX, n,
                           item.cursor + 1, item.qterm)
            # score the message exactly (same operations as score_pair) and find its designated term
            m = win_get(self.window, e.seq)
            mt = win_terms(self.window, m)
            i = 0
            j = 0
            acc = 0.0
            best = -1
            best_contrib = -1.0
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
            if best != <int>item.qterm:
                continue
            self._push(combine(self.q_alpha, spatial_sim(self.q_x, self.q_y, m.x, m.y, self.max_dist), acc),
                       e.seq, -1, 0, 0)
        return False

    # ------------------------------------------------------------------ Python access
    def memory_bytes(self):
        cdef size_t total = self.nodes.capacity() * sizeof(MNodeC) + self.root.capacity() * 4
        cdef size_t i
        for i in range(self.entries.size()):
            total += 24 + self.entries[i].capacity() * sizeof(MEntryC)
        return total

    def stats(self):
        return {"entries": self.entry_count, "nodes": self.nodes.size(), "queries": self.total_queries,
                "query_work": self.total_work}
