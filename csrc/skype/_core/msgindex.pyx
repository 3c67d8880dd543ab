"""Message index: the window's messages in one quadtree per term, for best-first retrieval.

Structure. For every term t, the window messages that contain t sit in a quadtree over the space; a
leaf holds at most ``leaf_capacity`` entries (seq, w, x, y, sig) sorted by w descending, where w is the
message's weight for t rounded up to float and x, y its coordinates rounded down (a counting walk
tests a cut leaf's entries without reading the window: ``entry_in_rect``). Every node keeps
``maxw``, the exact maximum w over its subtree (maintained on insert and on delete), and ``count``.
Underfull subtrees are collapsed back into a leaf.

Retrieval. ``query_start``/``query_next`` follow ``ranking.WindowRanking``: the groups are tree
nodes (bound from the node's rectangle and ``maxw``) and leaves (bound from the leaf's
rectangle and ``maxw``, then from their entries' own bounds, below). The other query terms' part of a
group's bound is read from their own trees at the same place: all trees split the same root
rectangle at the same midpoints and route a point alike, so a message under node n of term t's tree
lies, in term u's tree, under the node on n's path (or the leaf that ends that path higher up):
that node's ``maxw`` bounds the message's weight for u, and 0 when u has no message there. The
search carries these *shadow* nodes down with each group (``q_shadow``). An entry also carries
a 64-bit signature of its message's terms (``term_bit``): an entry is bounded alone by its own
location and only the other query terms whose bit it holds.  A leaf group first pops keyed by
its max weight; it is pushed back keyed by its best entry's bound; when it pops again, each entry
is pushed alone, and a message is read from the window only when its entry pops. The quadtree prunes by
space as well as by weight; ``termlists.TermLists`` is the cheaper-to-maintain alternative.

Snapshot floor.  A caller that takes only the first k messages says so (``query_floor``): once k
messages are scored, the k-th best of their scores bounds the k-th best of all from below, and a
group or entry bounded strictly below it is dropped instead of pushed (ties stay).  A leaf scan
(``_scan_leaf``) computes what does not depend on the entry once per leaf.
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort, push_heap, pop_heap
from libcpp.functional cimport greater
from libc.stdint cimport int32_t, uint32_t, uint64_t, UINT64_MAX
from libc.math cimport nextafterf, INFINITY
from skype._core.types cimport term_t, seq_t, RectC, SubTermC, MsgTermC, prefetch
from skype._core.window cimport WindowStore, MsgC, win_get, win_terms
from skype._core.scoring cimport mindist, combine, quadrant, child_rect, round_up, round_down
from skype._core.ranking cimport HeapItemC, WindowRanking

cdef double BOUND_SLACK = 1e-12
cdef uint32_t ENTRY_ITEM = 0x80000000u   # HeapItemC.qterm flag: one leaf entry
cdef uint32_t SCANNED_LEAF = 0x40000000u  # HeapItemC.qterm flag: a leaf keyed by its best entry's bound
cdef bint FLOOR_ON = True                  # query_floor takes effect (off: the paired bench's "before")
cdef bint LEAF_CONSTANTS = True            # leaf scans from per-leaf constants (off: the paired bench's "before")
cdef bint PREFETCH = True                  # fetch ahead what the next pop and a leaf scan read (off: "before")


def set_query_floor(bint on):
    """Whether :meth:`MessageIndex.query_floor` prunes (True, the default); False enumerates as
    before it, for a paired measurement of the two in one process."""
    global FLOOR_ON
    FLOOR_ON = on


def set_prefetch(bint on):
    """Whether the retrieval fetches ahead the node and leaf header of the heap's next item and a
    scanned leaf's entries all at once (True, the default), for a paired measurement."""
    global PREFETCH
    PREFETCH = on


def set_leaf_constants(bint on):
    """Whether a leaf's entries are bounded from the leaf's per-query constants (True, the
    default: :meth:`MessageIndex._scan_leaf`) or each by :meth:`MessageIndex._entry_bound`
    (False, as before), for a paired measurement of the two in one process."""
    global LEAF_CONSTANTS
    LEAF_CONSTANTS = on


cdef bint entry_heavier(const MEntryC& a, const MEntryC& b) noexcept nogil:
    return a.w > b.w


cdef inline double text_bound(double mine, double others, double rest) noexcept nogil:
    """A group's or entry's text bound: its own term's part plus the other terms' (each already
    at most its own), no more than its own plus the query's rest, no more than 1."""
    cdef double tub = mine + others
    if mine + rest < tub:
        tub = mine + rest
    return tub if tub < 1.0 else 1.0

cdef class MessageIndex(WindowRanking):
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
        self.insert_terms(seq, 0, 0xFFFFFFFFu)

    cdef void remove(self, seq_t seq) noexcept nogil:
        """Remove a message (still in the window store) from every tree it is in."""
        self.remove_terms(seq, 0, 0xFFFFFFFFu)

    cdef void insert_terms(self, seq_t seq, uint32_t first, uint32_t stop) noexcept nogil:
        """Insert a message into the trees of its terms first .. stop - 1 (positions in its
        term list; stop is clipped to its term count)."""
        cdef MsgC* m = win_get(self.window, seq)
        cdef const MsgTermC* terms = win_terms(self.window, m)
        cdef uint32_t j
        cdef term_t t
        cdef int32_t n
        cdef MEntryC e
        cdef size_t pos
        e.sig = 0
        for j in range(m.nterms):
            e.sig |= term_bit(terms[j].term)
        for j in range(first, min(stop, m.nterms)):
            t = terms[j].term
            if t >= self.root.size():
                self.root.resize(t + 1, -1)
            if self.root[t] < 0:
                n = self._new_root()
                self.root[t] = n
            n = self.root[t]
            e.seq = seq
            e.w = round_up(terms[j].w)
            e.x = round_down(m.x)
            e.y = round_down(m.y)
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

    cdef void remove_terms(self, seq_t seq, uint32_t first, uint32_t stop) noexcept nogil:
        """Remove a message (still in the window store) from the trees of its terms first ..
        stop - 1, as :meth:`insert_terms` put it there."""
        cdef MsgC* m = win_get(self.window, seq)
        cdef const MsgTermC* terms = win_terms(self.window, m)
        cdef uint32_t j
        cdef term_t t
        cdef int32_t n, p, top
        cdef size_t i
        cdef float mx
        cdef int q
        for j in range(first, min(stop, m.nterms)):
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
    cdef double _bound(self, int32_t n, uint32_t qi, float w, uint32_t ctx) noexcept nogil:
        """Score bound of the messages designated to query term qi under node n whose weight for
        it is at most w.  Each other query term j adds at most the designated contribution
        (a w) and at most w(j, s) times the max weight of term j's node at n's place (its
        *shadow*, ``q_shadow[ctx + j]``: every tree splits space alike, so a message under n
        lies under the shadow in j's tree; -1: j has no message there).  The ranking's bound
        ``a w + |s without t|`` caps it."""
        cdef double a = self.q_terms[qi].w
        cdef double mine = a * w, others = 0.0, o, tub
        cdef int j
        cdef int32_t s
        for j in range(self.q_n):
            s = self.q_shadow[ctx + j]
            if j == <int>qi or s < 0:
                continue
            o = self.q_terms[j].w * self.nodes[s].maxw
            others += o if o < mine else mine
        tub = text_bound(mine, others, self.q_rest[qi])
        return combine(self.q_alpha, 1.0 - mindist(&self.nodes[n].rect, self.q_x, self.q_y) / self.max_dist,
                       tub) + BOUND_SLACK

    cdef double _entry_bound(self, const MEntryC* e, uint32_t qi, uint32_t ctx) noexcept nogil:
        """:meth:`_bound` for one entry: its own location (the float box its coordinates round
        down from) and only the other query terms whose bit its signature holds."""
        cdef double a = self.q_terms[qi].w
        cdef double mine = a * e.w, others = 0.0, o, tub
        cdef int j
        cdef int32_t s
        cdef RectC box = RectC(e.x, e.y, nextafterf(e.x, INFINITY), nextafterf(e.y, INFINITY))
        for j in range(self.q_n):
            s = self.q_shadow[ctx + j]
            if j == <int>qi or s < 0 or not (e.sig & term_bit(self.q_terms[j].term)):
                continue
            o = self.q_terms[j].w * self.nodes[s].maxw
            others += o if o < mine else mine
        tub = text_bound(mine, others, self.q_rest[qi])
        self.total_entry_bounds += 1
        return combine(self.q_alpha, 1.0 - mindist(&box, self.q_x, self.q_y) / self.max_dist, tub) + BOUND_SLACK

    cdef void _push_group(self, int32_t n, uint32_t cursor, uint32_t qi, float w, uint32_t ctx) noexcept nogil:
        cdef HeapItemC item
        item.key = self._bound(n, qi, w, ctx)
        if item.key < self.q_floor:             # no message there can be among the k best
            return
        item.tie = UINT64_MAX
        item.node = n
        item.cursor = cursor
        item.qterm = qi
        item.ctx = ctx
        self._push_item(item)

    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil:
        cdef int i
        cdef term_t t
        cdef int32_t r
        self._begin(alpha, x, y, terms, n)
        self.q_floor_k = 0
        self.q_floor = -INFINITY
        self.q_best.clear()
        self.q_shadow.clear()
        for i in range(n):                      # the roots: every term's shadow at the top
            t = terms[i].term
            r = -1
            if t < self.root.size():
                r = self.root[t]
            self.q_shadow.push_back(r)
        for i in range(n):
            r = self.q_shadow[i]
            if r >= 0:
                self._push_group(r, 0, i, self.nodes[r].maxw, 0)

    cdef double _scan_leaf(self, int32_t n, uint32_t qi, uint32_t ctx, bint push) noexcept nogil:
        """Bound leaf n's entries alone (its term is query term qi).  ``push`` False: the best
        entry bound (-inf for none reaching the floor); the scan stops at the first entry whose
        weight cannot beat the best so far (entries are sorted by w).  ``push`` True: push each
        entry whose bound reaches the floor as an item of its own (returns -inf).

        The bound of an entry is :meth:`_entry_bound`'s.  With the leaf constants (the default),
        what does not depend on the entry is computed once per leaf: each other query term's
        part ``w(j, s) * maxw(shadow j)`` and its signature bit, and the leaf's spatial bound;
        an entry's text part is then a loop over those, and the spatial part of its own
        location (a square root) is computed only when the text part with the leaf's spatial
        bound can still count (the bound is the lower of the two, both valid)."""
        cdef vector[MEntryC]* leaf = &self.entries[n]
        cdef const MEntryC* ent = leaf.data()
        cdef size_t e, size = leaf.size()
        cdef double best = -INFINITY, b, bl, mine, others, tub, ssim_leaf
        cdef double a = self.q_terms[qi].w, rest = self.q_rest[qi]
        cdef int j, m = 0
        cdef int32_t s
        cdef const double* o
        cdef const uint64_t* bits
        cdef HeapItemC entry
        cdef RectC box
        cdef size_t off
        if PREFETCH:                                # every line of the entries at once, not one by one
            for off in range(0, size * sizeof(MEntryC), 64):
                prefetch(<const char*>ent + off)
        entry.tie = UINT64_MAX
        entry.node = n
        entry.qterm = qi | ENTRY_ITEM
        entry.ctx = ctx
        if not LEAF_CONSTANTS:                      # each entry by _entry_bound (as before)
            for e in range(size):
                if e and (push and self.q_floor > -INFINITY or not push):
                    b = self._bound(n, qi, ent[e].w, ctx)
                    if (not push and b <= best) or b < self.q_floor:
                        break
                b = self._entry_bound(&ent[e], qi, ctx)
                if push:
                    if b >= self.q_floor:
                        entry.key = b
                        entry.cursor = <uint32_t>e
                        self._push_item(entry)
                elif b > best:
                    best = b
            return -INFINITY if push else best
        self.lp_o.resize(self.q_n)
        self.lp_bit.resize(self.q_n)
        for j in range(self.q_n):
            s = self.q_shadow[ctx + j]
            if j == <int>qi or s < 0:
                continue
            self.lp_o[m] = self.q_terms[j].w * self.nodes[s].maxw
            self.lp_bit[m] = term_bit(self.q_terms[j].term)
            m += 1
        o = self.lp_o.data()
        bits = self.lp_bit.data()
        ssim_leaf = 1.0 - mindist(&self.nodes[n].rect, self.q_x, self.q_y) / self.max_dist
        for e in range(size):
            mine = a * ent[e].w
            if e:                                   # the leaf's bound at this w (:meth:`_bound`)
                others = 0.0
                for j in range(m):
                    others += o[j] if o[j] < mine else mine
                b = combine(self.q_alpha, ssim_leaf, text_bound(mine, others, rest)) + BOUND_SLACK
                if (not push and b <= best) or b < self.q_floor:
                    break
            others = 0.0
            for j in range(m):
                if ent[e].sig & bits[j]:
                    others += o[j] if o[j] < mine else mine
            tub = text_bound(mine, others, rest)
            self.total_entry_bounds += 1
            bl = combine(self.q_alpha, ssim_leaf, tub) + BOUND_SLACK
            if bl < self.q_floor or (not push and bl <= best):
                continue
            box = RectC(ent[e].x, ent[e].y, nextafterf(ent[e].x, INFINITY), nextafterf(ent[e].y, INFINITY))
            b = combine(self.q_alpha, 1.0 - mindist(&box, self.q_x, self.q_y) / self.max_dist, tub) + BOUND_SLACK
            if bl < b:
                b = bl
            if push:
                if b >= self.q_floor:
                    entry.key = b
                    entry.cursor = <uint32_t>e
                    self._push_item(entry)
            elif b > best:
                best = b
        return -INFINITY if push else best

    cdef void query_floor(self, uint32_t k) noexcept nogil:
        """Only the k best messages will be taken from this query (k > 0; call after
        :meth:`query_start`): once k messages are scored, the k-th best of their scores is a
        floor under the k-th best score of all, and a group or entry bounded below it is
        dropped instead of pushed.  Ties stay (only keys strictly below the floor go), so the
        first k messages are the same; the messages after them are not all enumerated."""
        if FLOOR_ON:
            self.q_floor_k = k

    cdef void _note_score(self, double score) noexcept nogil:
        """A message scored (once: through its designated term) enters the floor's k best."""
        self.q_best.push_back(score)
        push_heap(self.q_best.begin(), self.q_best.end(), greater[double]())
        if self.q_best.size() > self.q_floor_k:
            pop_heap(self.q_best.begin(), self.q_best.end(), greater[double]())
            self.q_best.pop_back()
        if self.q_best.size() == self.q_floor_k:
            self.q_floor = self.q_best[0]

    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil:
        cdef HeapItemC item
        cdef double key, got
        cdef uint32_t qi
        cdef int32_t n, c, s
        cdef int q, j
        cdef uint32_t ctx
        cdef vector[MEntryC]* leaf
        while self.heap.size():
            item = self._pop()
            if PREFETCH and self.heap.size() and self.heap[0].node >= 0:   # the next pop's node and leaf
                prefetch(&self.nodes[self.heap[0].node])
                prefetch(&self.entries[self.heap[0].node])
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
                        ctx = <uint32_t>self.q_shadow.size()
                        for j in range(self.q_n):   # the shadows one level down (a leaf stays)
                            s = self.q_shadow[item.ctx + j]
                            if s >= 0 and self.nodes[s].child >= 0:
                                s = self.nodes[s].child + q
                            self.q_shadow.push_back(s)
                        self._push_group(c, 0, item.qterm, self.nodes[c].maxw, ctx)
                continue
            leaf = &self.entries[n]
            if item.qterm & ENTRY_ITEM:             # one entry, keyed by its own bound: score it
                got = self._offer(leaf[0][item.cursor].seq, item.qterm & ~ENTRY_ITEM)
                self.total_reads += 1
                if self.q_floor_k and got > -INFINITY:
                    self._note_score(got)
                continue
            qi = item.qterm & ~SCANNED_LEAF
            if not (item.qterm & SCANNED_LEAF):     # first pop: key the leaf by its best entry
                key = self._scan_leaf(n, qi, item.ctx, False)
                if key < self.q_floor or key == -INFINITY:    # no entry can count
                    continue
                if key < item.key:
                    item.key = key
                    item.qterm = qi | SCANNED_LEAF
                    self._push_item(item)
                    continue
            self._scan_leaf(n, qi, item.ctx, True)    # every entry alone, keyed by its own bound
        return False

    # ------------------------------------------------------------------ Python access
    def memory_bytes(self):
        cdef size_t total = self.nodes.capacity() * sizeof(MNodeC) + self.root.capacity() * 4
        cdef size_t i
        for i in range(self.entries.size()):
            total += 24 + self.entries[i].capacity() * sizeof(MEntryC)
        return total

    def stats(self):
        return {"layout": "quadtree", "entries": self.entry_count, "nodes": self.nodes.size(),
                "queries": self.total_queries, "query_work": self.total_work, "query_reads": self.total_reads,
                "query_entry_bounds": self.total_entry_bounds}
