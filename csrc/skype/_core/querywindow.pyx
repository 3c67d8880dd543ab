# cython: language_level=3
"""The window of the query kinds (range, knn, terms) and the snapshot queries over it.

It keeps a :class:`WindowStore` and a :class:`MessageIndex` of its own (the top-k core's are
private to it), with every term id shifted by one: term 0, ``ALL_TERM``, is held by every
message, so its tree is a spatial quadtree of the whole window.  Node counts, rectangles and
leaf entries are the message index's own.

Snapshot walks (all exact; nothing is approximated):

* ``c_range``: walk the trees of the predicate's *cover* (terms one of which every match
  holds; ``ALL_TERM`` for no predicate), descending only into nodes that meet the rectangle.
  A message reached through cover term j is *designated* to j only if it holds none of the
  earlier cover terms, so it is reported once; then the predicate and ``last`` are checked.
  A predicate without AND holds for every message of a cover term's tree: those are reported
  through every tree they are in, without reading the message, and deduplicated at the end (a
  sort); so are the entries of nodes inside the rectangle, without a location test.
* ``c_knn``: best-first search over the same trees: a min-heap of nodes keyed by MINDIST and
  messages keyed by their distance.  On equal keys a node pops before a message and a newer
  message before an older one.  MINDIST is computed with the same rounded operations as a
  distance and is monotone, so no node holds a message nearer than its key: messages pop in
  exact (distance, newest first) order.
* ``c_region_counts``: the messages of the ``ALL_TERM`` tree inside the rectangle, counted per
  term; ``c_top_terms`` ranks them by count descending, then term name ascending (UTF-8 byte
  order, which is code point order).
* ``last``: a message counts when ``now - t < last`` holds exactly (TwoSum, as the time window).

Per-term trees are kept only once something reads them (``c_need_term_trees``: kNN and
``terms`` subscriptions, snapshot ``range``, ``knn`` and ``topk`` queries), and so is the
``ALL_TERM`` tree (``c_need_spatial_tree``: the walks that read it call it first, so a stream of
``range`` subscriptions alone keeps no tree at all; the per-term trees keep it with them).  A
tree first needed is built from the window store, oldest first.  ``c_range`` without the
per-term trees walks the ``ALL_TERM`` tree and tests the cover and the predicate per message: the
same answer.  Invariant: with
``term_trees`` set, every window message is in the tree of each of its terms; with
``spatial_tree`` set, in the ``ALL_TERM`` tree; in no other tree.
"""
import numpy as np
from libcpp.vector cimport vector
from libcpp.string cimport string
from libcpp.algorithm cimport sort as std_sort, unique as std_unique
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, UINT64_MAX
from skype._core.types cimport term_t, seq_t, RectC, MsgTermC
from skype._core.window cimport WindowStore, MsgC, win_get, win_terms, win_oldest
from skype._core.msgindex cimport MessageIndex, MEntryC, entry_in_rect
from skype._core.scoring cimport mindist, outside_time_window, round_down
from skype._core.predicate cimport eval_program, holds_term, point_distance, OP_AND


cdef inline bint rects_meet(const RectC* a, const RectC* b) noexcept nogil:
    return a.minx <= b.maxx and b.minx <= a.maxx and a.miny <= b.maxy and b.miny <= a.maxy


cdef inline bint near_before(const NearC* a, const NearC* b) noexcept nogil:
    """True when a must pop before b."""
    return a.key < b.key or (a.key == b.key and a.tie > b.tie)


cdef struct RankC:                # a term of a top-terms ranking
    uint32_t count
    term_t term

cdef vector[string]* RANK_NAMES = NULL   # the names the comparator reads (set around each sort)


cdef bint rank_before(const RankC& a, const RankC& b) noexcept nogil:
    if a.count != b.count:
        return a.count > b.count
    return RANK_NAMES[0][a.term] < RANK_NAMES[0][b.term]


cdef class QueryWindow:
    def __cinit__(self, double minx, double miny, double maxx, double maxy, double max_dist,
                  uint64_t count_window, double time_window, uint32_t leaf_capacity=64):
        self.window = WindowStore()
        self.index = MessageIndex(self.window, minx, miny, maxx, maxy, max_dist, leaf_capacity)
        self.count_window = count_window
        self.time_window = time_window
        self.max_dist = max_dist
        self.term_trees = False
        self.spatial_tree = False
        self.names.push_back(b"")

    # ------------------------------------------------------------------ names and stream
    def add_names(self, list names):
        """Append the names of term ids len(names) - 1 ... (vocabulary order, UTF-8 bytes)."""
        cdef bytes b
        for b in names:
            self.names.push_back(b)

    def name_count(self):
        return self.names.size() - 1

    cdef seq_t c_append(self, int64_t ext_id, double x, double y, double t,
                        const uint32_t* terms, const double* w, int n) noexcept nogil:
        cdef int j
        cdef seq_t seq
        self.scratch.resize(n + 1)
        self.scratch[0].term = ALL_TERM
        self.scratch[0].pad = 0
        self.scratch[0].w = 1.0
        for j in range(n):
            self.scratch[j + 1].term = terms[j] + 1
            self.scratch[j + 1].pad = 0
            self.scratch[j + 1].w = w[j]
        seq = self.window.append(ext_id, x, y, t, self.scratch.data(), n + 1)
        self.index.insert_terms(seq, 0 if self.spatial_tree else 1, n + 1 if self.term_trees else 1)
        return seq

    cdef void c_need_term_trees(self) noexcept nogil:
        """Keep the per-term trees from now on (built from the window store the first time), and
        the ``ALL_TERM`` tree with them (their readers read it too)."""
        cdef seq_t seq
        if self.term_trees:
            return
        self.c_need_spatial_tree()
        for seq in range(self.window.oldest_seq, self.window.oldest_seq + self.window.count):
            self.index.insert_terms(seq, 1, 0xFFFFFFFFu)
        self.term_trees = True

    cdef void c_need_spatial_tree(self) noexcept nogil:
        """Keep the ``ALL_TERM`` tree from now on (built from the window store the first time)."""
        cdef seq_t seq
        if self.spatial_tree:
            return
        for seq in range(self.window.oldest_seq, self.window.oldest_seq + self.window.count):
            self.index.insert_terms(seq, 0, 1)
        self.spatial_tree = True

    cdef bint c_must_expire(self, double t, bint arriving) noexcept nogil:
        """Whether the oldest message leaves before a message at t arrives (or the clock moves to t)."""
        if self.window.count == 0:
            return False
        if self.count_window:
            return arriving and self.window.count >= self.count_window
        return outside_time_window(win_oldest(self.window).t, t, self.time_window)

    cdef void c_pop_oldest(self) noexcept nogil:
        self.index.remove_terms(win_oldest(self.window).seq, 0 if self.spatial_tree else 1,
                                0xFFFFFFFFu if self.term_trees else 1)
        self.window.pop_oldest()

    cdef bint c_fresh(self, const MsgC* m, double now, double last) noexcept nogil:
        """``now - t < last`` exactly (last <= 0: no limit)."""
        if last <= 0.0:
            return True
        return not outside_time_window(m.t, now, last)

    cdef bint c_accept(self, const MsgC* m, uint32_t via, const int64_t* prog, int plen,
                       const int64_t* cover, int ncover) noexcept nogil:
        """m reached through cover term ``via``: designated to it, and satisfies the predicate."""
        cdef const MsgTermC* mt = win_terms(self.window, m)
        cdef uint32_t i
        for i in range(via):
            if holds_term(mt, m.nterms, <term_t>cover[i]):
                return False
        return eval_program(prog, plen, mt, m.nterms, &self.stack)

    cdef bint c_accept_any(self, const MsgC* m, const int64_t* prog, int plen, const int64_t* cover,
                           int ncover) noexcept nogil:
        """m holds one of the cover terms and satisfies the predicate."""
        cdef const MsgTermC* mt = win_terms(self.window, m)
        cdef int i
        for i in range(ncover):
            if holds_term(mt, m.nterms, <term_t>cover[i]):
                return eval_program(prog, plen, mt, m.nterms, &self.stack)
        return False

    # ------------------------------------------------------------------ snapshot walks
    cdef void c_range(self, const RectC* r, const int64_t* prog, int plen, const int64_t* cover, int ncover,
                      double now, double last, vector[seq_t]* out) noexcept nogil:
        cdef int c, i, ntrees = ncover if ncover else 1
        cdef term_t t
        cdef int32_t n, q
        cdef size_t e, start = out.size()
        cdef MsgC* m
        cdef RectC* nr
        cdef vector[MEntryC]* leaf
        cdef bint inside
        cdef bint spatial = ncover > 0 and not self.term_trees   # the ALL_TERM tree, cover tested
        cdef bint implied = ncover > 0 and not spatial           # no AND: a cover term implies a match
        for i in range(plen):
            if prog[i] == OP_AND:
                implied = False
        if spatial:
            ntrees = 1
        if ncover == 0 or spatial:
            self.c_need_spatial_tree()
        for c in range(ntrees):
            t = <term_t>cover[c] if ncover and not spatial else ALL_TERM
            if t >= self.index.root.size() or self.index.root[t] < 0:
                continue
            self.walk.clear()
            self.walk.push_back(self.index.root[t])
            while self.walk.size():
                n = self.walk.back()             # ~n: a node known to lie inside r
                self.walk.pop_back()
                inside = n < 0
                if inside:
                    n = ~n
                if self.index.nodes[n].count == 0:
                    continue
                if not inside:
                    nr = &self.index.nodes[n].rect
                    if not rects_meet(nr, r):
                        continue
                    inside = r.minx <= nr.minx and nr.maxx <= r.maxx and r.miny <= nr.miny and nr.maxy <= r.maxy
                if self.index.nodes[n].child >= 0:
                    for q in range(4):
                        self.walk.push_back(~(self.index.nodes[n].child + q) if inside
                                            else self.index.nodes[n].child + q)
                    continue
                leaf = &self.index.entries[n]
                if inside and (ncover == 0 or implied) and last <= 0.0:   # no message to read
                    for e in range(leaf.size()):
                        out.push_back(leaf[0][e].seq)
                    continue
                for e in range(leaf.size()):
                    m = win_get(self.window, leaf[0][e].seq)
                    if (inside or (r.minx <= m.x <= r.maxx and r.miny <= m.y <= r.maxy)) \
                            and self.c_fresh(m, now, last) \
                            and (ncover == 0 or implied
                                 or (self.c_accept_any(m, prog, plen, cover, ncover) if spatial
                                     else self.c_accept(m, c, prog, plen, cover, ncover))):
                        out.push_back(m.seq)
        if implied and ncover > 1:               # reached through several cover terms: once each
            std_sort(out.begin() + start, out.end())
            out.erase(std_unique(out.begin() + start, out.end()), out.end())

    cdef void _near_push(self, double key, uint64_t tie, int32_t node, uint32_t cover) noexcept nogil:
        cdef size_t i, parent
        cdef NearC item
        item.key = key
        item.tie = tie
        item.node = node
        item.cover = cover
        self.heap.push_back(item)
        i = self.heap.size() - 1
        while i > 0:
            parent = (i - 1) >> 1
            if not near_before(&self.heap[i], &self.heap[parent]):
                break
            self.heap[i], self.heap[parent] = self.heap[parent], self.heap[i]
            i = parent

    cdef NearC _near_pop(self) noexcept nogil:
        cdef NearC top = self.heap[0]
        cdef size_t i = 0, child, n
        self.heap[0] = self.heap.back()
        self.heap.pop_back()
        n = self.heap.size()
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and near_before(&self.heap[child + 1], &self.heap[child]):
                child += 1
            if not near_before(&self.heap[child], &self.heap[i]):
                break
            self.heap[i], self.heap[child] = self.heap[child], self.heap[i]
            i = child
        return top

    cdef void c_knn(self, double x, double y, size_t k, const int64_t* prog, int plen,
                    const int64_t* cover, int ncover, double now, double last,
                    vector[seq_t]* out, vector[double]* dist) noexcept nogil:
        cdef int c, ntrees = ncover if ncover else 1
        cdef term_t t
        cdef int32_t n, q, child
        cdef size_t e
        cdef MsgC* m
        cdef NearC item
        cdef vector[MEntryC]* leaf
        self.heap.clear()
        if k == 0:
            return
        if ncover:
            self.c_need_term_trees()
        else:
            self.c_need_spatial_tree()
        for c in range(ntrees):
            t = <term_t>cover[c] if ncover else ALL_TERM
            if t < self.index.root.size() and self.index.root[t] >= 0:
                n = self.index.root[t]
                self._near_push(mindist(&self.index.nodes[n].rect, x, y), UINT64_MAX, n, c)
        while self.heap.size() and out.size() < k:
            item = self._near_pop()
            if item.node < 0:
                out.push_back(item.tie)
                dist.push_back(item.key)
                continue
            n = item.node
            if self.index.nodes[n].count == 0:
                continue
            if self.index.nodes[n].child >= 0:
                for q in range(4):
                    child = self.index.nodes[n].child + q
                    if self.index.nodes[child].count:
                        self._near_push(mindist(&self.index.nodes[child].rect, x, y), UINT64_MAX, child,
                                        item.cover)
                continue
            leaf = &self.index.entries[n]
            for e in range(leaf.size()):
                m = win_get(self.window, leaf[0][e].seq)
                if self.c_fresh(m, now, last) and \
                        (ncover == 0 or self.c_accept(m, item.cover, prog, plen, cover, ncover)):
                    self._near_push(point_distance(x, y, m.x, m.y), m.seq, -1, item.cover)

    cdef void c_region_counts(self, const RectC* r, double now, double last,
                              vector[uint32_t]* counts, vector[term_t]* touched) noexcept nogil:
        cdef vector[seq_t] seqs
        cdef size_t i
        cdef uint32_t j
        cdef MsgC* m
        cdef const MsgTermC* mt
        cdef term_t t
        self.c_range(r, NULL, 0, NULL, 0, now, last, &seqs)
        for i in range(seqs.size()):
            m = win_get(self.window, seqs[i])
            mt = win_terms(self.window, m)
            for j in range(1, m.nterms):
                t = mt[j].term
                if t >= counts.size():
                    counts.resize(t + 1, 0)
                if counts[0][t] == 0:
                    touched.push_back(t)
                counts[0][t] += 1

    cdef uint32_t c_count_in(self, term_t t, const RectC* r) noexcept nogil:
        """Window messages holding term ``t`` inside ``r`` (edges included): subtree counts of
        the nodes inside ``r``, a scan of the leaves it cuts."""
        cdef uint32_t total = 0
        cdef int32_t n, q
        cdef RectC* nr
        cdef RectC rd = RectC(round_down(r.minx), round_down(r.miny), round_down(r.maxx), round_down(r.maxy))
        self.c_need_term_trees()
        if t == ALL_TERM:
            self.c_need_spatial_tree()
        if t >= self.index.root.size() or self.index.root[t] < 0:
            return 0
        self.walk.clear()
        self.walk.push_back(self.index.root[t])
        while self.walk.size():
            n = self.walk.back()
            self.walk.pop_back()
            nr = &self.index.nodes[n].rect
            if self.index.nodes[n].count == 0 or not rects_meet(nr, r):
                continue
            if r.minx <= nr.minx and nr.maxx <= r.maxx and r.miny <= nr.miny and nr.maxy <= r.maxy:
                total += self.index.nodes[n].count
                continue
            if self.index.nodes[n].child >= 0:
                for q in range(4):
                    self.walk.push_back(self.index.nodes[n].child + q)
                continue
            total += self._count_leaf(n, r, &rd)
        return total

    cdef uint32_t _count_leaf(self, int32_t n, const RectC* r, const RectC* rd) noexcept nogil:
        """Entries of leaf n whose message lies in r, from the entries' coordinates (a window
        read only for an entry within a float step of an edge: ``entry_in_rect``)."""
        cdef vector[MEntryC]* leaf = &self.index.entries[n]
        cdef const MEntryC* ent = leaf.data()
        cdef size_t e, size = leaf.size()
        cdef uint32_t total = 0
        cdef int where
        cdef MsgC* m
        for e in range(size):
            where = entry_in_rect(&ent[e], r, rd)
            if where < 0:
                m = win_get(self.window, ent[e].seq)
                where = r.minx <= m.x <= r.maxx and r.miny <= m.y <= r.maxy
            total += where
        return total

    cdef uint32_t c_count_bounded(self, term_t t, const RectC* r, uint32_t need) noexcept nogil:
        """:meth:`c_count_in`, or an upper bound of it below ``need``.  The walk is breadth first
        and keeps ``inside + cut + open`` (counts of the nodes inside the rectangle, of the leaves
        it cuts, of the nodes not yet expanded) as an upper bound: once that falls below ``need``
        it is returned.  Cut leaves are scanned only at the end, when the bound is still reached
        (a term that cannot reach ``need`` here reads no message)."""
        cdef uint32_t total = 0, cut = 0, pending
        cdef int32_t n, q, c
        cdef size_t i, head = 0
        cdef RectC* nr
        cdef RectC rd = RectC(round_down(r.minx), round_down(r.miny), round_down(r.maxx), round_down(r.maxy))
        self.c_need_term_trees()
        if t == ALL_TERM:
            self.c_need_spatial_tree()
        if t >= self.index.root.size() or self.index.root[t] < 0:
            return 0
        self.walk.clear()
        self.cut.clear()
        self.walk.push_back(self.index.root[t])
        pending = self.index.nodes[self.index.root[t]].count
        while head < self.walk.size():
            if total + cut + pending < need:
                return total + cut + pending
            n = self.walk[head]
            head += 1
            pending -= self.index.nodes[n].count
            nr = &self.index.nodes[n].rect
            if r.minx <= nr.minx and nr.maxx <= r.maxx and r.miny <= nr.miny and nr.maxy <= r.maxy:
                total += self.index.nodes[n].count
            elif self.index.nodes[n].child >= 0:
                for q in range(4):
                    c = self.index.nodes[n].child + q
                    if self.index.nodes[c].count and rects_meet(&self.index.nodes[c].rect, r):
                        self.walk.push_back(c)
                        pending += self.index.nodes[c].count
            else:
                self.cut.push_back(n)
                cut += self.index.nodes[n].count
        if total + cut < need:
            return total + cut
        for i in range(self.cut.size()):
            cut -= self.index.nodes[self.cut[i]].count
            total += self._count_leaf(self.cut[i], r, &rd)
            if total + cut < need:               # still a bound below need: stop there too
                return total + cut
        return total

    cdef void c_top_terms(self, vector[uint32_t]* counts, vector[term_t]* touched, size_t k,
                          vector[term_t]* out) noexcept nogil:
        """The k best of the touched terms (count descending, then name ascending); resets the
        counts of every touched term to 0."""
        global RANK_NAMES
        cdef vector[RankC] ranked
        cdef RankC rc
        cdef size_t i
        for i in range(touched.size()):
            rc.term = touched[0][i]
            rc.count = counts[0][rc.term]
            counts[0][rc.term] = 0
            if rc.count:
                ranked.push_back(rc)
        touched.clear()
        RANK_NAMES = &self.names
        std_sort(ranked.begin(), ranked.end(), rank_before)
        for i in range(min(k, ranked.size())):
            out.push_back(ranked[i].term)

    # ------------------------------------------------------------------ Python entry points
    def size(self):
        return self.window.count

    def window_has(self, const int64_t[::1] ids):
        return self.window.contains_ids(ids)

    def window_ids(self):
        return self.window.ext_ids()

    def window_arrays(self):
        """The window's messages, oldest first, as the columns of a message batch: ids, x, y, t,
        indptr, term ids (the vocabulary's: shifted back, ALL_TERM dropped) and weights."""
        cdef uint64_t n = self.window.count, i, total = 0
        cdef uint32_t j
        cdef MsgC* m
        cdef const MsgTermC* mt
        for i in range(n):
            total += win_get(self.window, self.window.oldest_seq + i).nterms - 1
        ids = np.empty(n, dtype=np.int64)
        xs = np.empty(n, dtype=np.float64)
        ys = np.empty(n, dtype=np.float64)
        ts = np.empty(n, dtype=np.float64)
        indptr = np.zeros(n + 1, dtype=np.int64)
        terms = np.empty(total, dtype=np.uint32)
        weights = np.empty(total, dtype=np.float64)
        cdef int64_t[::1] oi = ids, op = indptr
        cdef double[::1] ox = xs, oy = ys, ot = ts, ow = weights
        cdef uint32_t[::1] oterm = terms
        cdef uint64_t pos = 0
        for i in range(n):
            m = win_get(self.window, self.window.oldest_seq + i)
            mt = win_terms(self.window, m)
            oi[i], ox[i], oy[i], ot[i] = m.ext_id, m.x, m.y, m.t
            for j in range(1, m.nterms):
                oterm[pos] = mt[j].term - 1
                ow[pos] = mt[j].w
                pos += 1
            op[i + 1] = pos
        return ids, xs, ys, ts, indptr, terms, weights
