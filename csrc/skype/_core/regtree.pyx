# cython: language_level=3
"""Registration by search over a per-term k-d tree of (x, y, weight): the layout of the search.

The earlier layout cut a term's list into weight bands before it ordered space, so a
subscription whose alpha makes distance dominate found a near block in every band and opened
one in each: its work grew with the window (it was removed, ``docs/results/2026-11-29-library.md``).
Here every term's list (regsearch's entries: exact weight, location, seq; its masks beside them)
is one k-d tree whose splits choose, node by node, the dimension that spreads most: x or y
(divided by MaxDist, as the spatial score is) or the weight (times ``WEIGHT_SCALE``).  A
spread-out list splits by location first; a city's cluster, where all locations are close,
then splits by weight.  So a node's box and largest weight are tight in whichever dimension
still matters, for any alpha: one structure serves distance-led and text-led subscriptions.

Layout.  A term's entries are permuted in place so that every node covers a contiguous run
[first, first + count); a node of more than BLOCK entries splits at a multiple of BLOCK (the
median of its dimension, by ``nth_element``), so leaves hold BLOCK entries (the last one of a
term up to BLOCK).  Children are stored side by side.  Each node has the bounding box of its
entries' locations and their largest weight, the header of regsearch's blocks, in floats rounded
outward (the box's minima down, its maxima and the weight up: a box that contains the exact one,
so its key still bounds every entry's score; the splits use the exact box): a node is 32 bytes
(56 with doubles), a child pair one cache line.  Build cost: the collection of regsearch (two
passes over the window) and O(n log n) per term.

Search.  regsearch's best-first search, with the tree's root per query term as its first
item: regsearch's keys (``_box_bound``, here ``_node_bound`` on the float box: MINDIST to the
box, w(t,s) times the largest weight),
entry items for entries that may hold a later term of s, regsearch's leaf scoring and
designation, the same stopping rule.  A popped node descends into its better child while that
child's key is at least the queue's top, pushing the other child (a key below the worst kept
score, once C are kept, is dropped): fewer heap operations, the same set of items examined in
key order up to ties.  Exactness is regsearch's argument unchanged: every unscored message lies
under an item (queued, being descended, or dropped with a key below the worst kept score, which
only rises) whose key bounds its score, so the search stops with the first C of the ranking
order, which is a total order (seqs are unique); the order in which items are examined does not
change the kept set.

Order of the searches.  The engine orders a bulk batch before its passes (``order_batch``, for
the replay and the search alike) by the subscription's most frequent term, then by the Z-order
of its location: consecutive searches share that term's tree in cache and near ones its paths,
and a pass holds whole terms.  The runs do not depend on the order, and both paths build the
buffers in it, so they stay identical to each other (``set_search_order(0)`` keeps the batch
as given, for the A/B of ``bench/registration_speed.py``).  A pass is searched and built in
parts whose runs fit in ``RUNS_AT_ONCE``, each sorted by term.  ``set_prefetch_items``: 1
starts the loads of the entry items' masks and window records when they are pushed (most are
popped, then read from the window: two dependent misses), 2 (the default) also their terms; 0
none.  No order and no
prefetch changes a run (tests/test_registration_search.py).
"""
cimport cython
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libcpp.algorithm cimport sort as std_sort
from libc.math cimport sqrt, nextafterf, INFINITY
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport sid_t, seq_t, SubTermC, now_ns, prefetch
from skype._core.window cimport WindowStore, win_get, win_terms
from skype._core.subindex cimport SubTable, SubHotC
from skype._core.blocks cimport spread16              # a Z-order half (the block layout's)
from skype._core.reevaluation cimport RankedC
from skype._core.buffers cimport Buffers
from skype._core.bulk cimport bulk_capacity
from skype._core.regsearch cimport (RegistrationIndex, SEntryC, STermC, SItemC, LEVEL_ENTRY, box_start,
                                    box_widen)
from skype._core.regmasks cimport holds_bits
from skype._core.scoring cimport combine, spatial_sim

cdef double BOUND_SLACK = 1e-12  # regsearch's: covers the rounding of the text sums
cdef double NORM_SLACK = 1e-9    # a message's weights have norm 1 up to rounding: their squares sum below 1 + this
cdef double WEIGHT_SCALE = 1.0  # a weight extent counts as this much location extent / MaxDist (tuned: docs/results.md)
# the runs held at once (12 bytes each): a pass of the engine (up to its heap budget, 16M runs)
# is searched and built in parts of at most this many; a search needs no replay, so a part
# costs nothing but its sort, and the runs' memory (a registration transient) stays small
cdef uint64_t RUNS_AT_ONCE = 2 << 20
# a bulk batch ordered by term and place before its passes (order_batch): 1, or kept as given: 0
cdef int SEARCH_ORDER = 1
# entry items: their masks and messages' window records prefetched when pushed (1), and their terms (2)
cdef int PREFETCH_ITEMS = 2

cdef enum:
    BLOCK = 8                # entries per leaf
    LEVEL_NODE = 4           # an item's level: a tree node (regsearch's entry items: LEVEL_ENTRY)


cdef extern from *:
    """
    #include <algorithm>
    /* partial sort of a term's entries around nth by one coordinate: 0 x, 1 y, 2 weight */
    template <class T> static inline void skype_nth_by(T* first, T* nth, T* last, int dim) {
        if (dim == 0)
            std::nth_element(first, nth, last, [](const T& a, const T& b) { return a.x < b.x; });
        else if (dim == 1)
            std::nth_element(first, nth, last, [](const T& a, const T& b) { return a.y < b.y; });
        else
            std::nth_element(first, nth, last, [](const T& a, const T& b) { return a.w > b.w; });
    }
    """
    void nth_by "skype_nth_by"(SEntryC* first, SEntryC* nth, SEntryC* last, int dim) noexcept nogil


cdef inline float down(double v) noexcept nogil:
    """The largest float at most v."""
    cdef float f = <float>v
    if <double>f > v:
        f = nextafterf(f, -INFINITY)
    return f


cdef inline float up(double v) noexcept nogil:
    """The smallest float at least v."""
    cdef float f = <float>v
    if <double>f < v:
        f = nextafterf(f, INFINITY)
    return f


@cython.final
cdef class RegistrationTree(RegistrationIndex):
    def __cinit__(self, WindowStore window, double max_dist):
        self.weight_scale = WEIGHT_SCALE
        self.n_descents = 0

    cdef void build(self, SubTable table, const sid_t* sids, size_t n) noexcept nogil:
        """Index the window's messages under the terms of sids[0:n]: one k-d tree per term."""
        cdef double t0 = now_ns()
        cdef size_t nt
        cdef uint32_t root, top
        cdef vector[uint32_t] todo
        cdef STermC* st
        cdef TNodeC node
        self._collect(table, sids, n)
        self.nodes.clear()
        self.nodes.reserve(self.entries.size() // 4 + 2 * self.terms.size())
        for nt in range(self.terms.size()):
            st = &self.terms[nt]
            root = top = <uint32_t>self.nodes.size()
            node.first = <uint32_t>st.first     # entries stay far below 2^32 (48+ bytes each)
            node.count = <uint32_t>(st.stop - st.first)
            node.child = 0
            self.nodes.push_back(node)
            todo.push_back(root)
            while todo.size():
                root = todo.back()
                todo.pop_back()
                self._split(root)
                if self.nodes[root].child:
                    todo.push_back(self.nodes[root].child)
                    todo.push_back(self.nodes[root].child + 1)
            st.group0 = top                         # the term's tree: its root
            st.ngroups = <uint32_t>(self.nodes.size() - top)    # and its node count
        self._gather_masks()
        self.build_ns += now_ns() - t0

    cdef void _split(self, uint32_t at) noexcept nogil:
        """The header of node ``at``; over BLOCK entries, its children (split at a multiple of
        BLOCK along its widest dimension)."""
        cdef TNodeC* nd = &self.nodes[at]
        cdef SEntryC* e = self.entries.data() + nd.first
        cdef uint32_t i, count = nd.count, half
        cdef uint32_t first = nd.first
        cdef double minw, ex, ey, ew
        cdef int dim
        cdef TNodeC child
        cdef SBoxC box
        box_start(&box, &e[0])
        minw = e[0].w
        for i in range(1, count):
            box_widen(&box, e[i].x, e[i].y, e[i].x, e[i].y, e[i].w)
            if e[i].w < minw:
                minw = e[i].w
        nd.minx = down(box.r.minx)
        nd.miny = down(box.r.miny)
        nd.maxx = up(box.r.maxx)
        nd.maxy = up(box.r.maxy)
        nd.maxw = up(box.maxw)
        if count <= BLOCK:
            return
        ex = (box.r.maxx - box.r.minx) / self.max_dist
        ey = (box.r.maxy - box.r.miny) / self.max_dist
        ew = (box.maxw - minw) * self.weight_scale
        dim = 0 if ex >= ey else 1
        if ew > (ex if ex >= ey else ey):
            dim = 2
        half = ((count + BLOCK - 1) // BLOCK + 1) // 2 * BLOCK
        nth_by(e, e + half, e + count, dim)
        nd.child = <uint32_t>self.nodes.size()
        child.first = nd.first
        child.count = half
        child.child = 0
        self.nodes.push_back(child)                 # nd may move: not used below
        child.first = first + half
        child.count = count - half
        self.nodes.push_back(child)

    cdef double _node_bound(self, const SubHotC* h, const SubTermC* terms, uint32_t qi,
                            const TNodeC* nd) noexcept nogil:
        """regsearch's ``_box_bound`` on the node's float box: it contains the exact box (rounded
        outward) and its weight is at least the largest, so the key bounds as the exact box's
        does (MINDIST, computed in double from the floats, is monotone in the box)."""
        cdef double tub = terms[qi].w * nd.maxw, dx = 0.0, dy = 0.0
        if tub > 1.0:
            tub = 1.0
        if h.x < nd.minx:
            dx = nd.minx - h.x
        elif h.x > nd.maxx:
            dx = h.x - nd.maxx
        if h.y < nd.miny:
            dy = nd.miny - h.y
        elif h.y > nd.maxy:
            dy = h.y - nd.maxy
        return combine(h.alpha, 1.0 - sqrt(dx * dx + dy * dy) / self.max_dist, tub) + BOUND_SLACK

    cdef void top_c(self, const SubHotC* h, const SubTermC* terms, uint32_t cap,
                    vector[RankedC]* out) noexcept nogil:
        """The first ``cap`` messages of the subscription's ranking order (all matches if fewer),
        appended to ``out`` in that order."""
        cdef int nq = h.nterms, i
        cdef int32_t slot
        cdef STermC* st
        cdef SItemC it
        cdef const TNodeC* nd
        cdef uint32_t at, better, other
        cdef double kl, kr, kb, ko
        self._prepare(terms, nq)
        for i in range(nq):
            slot = self._slot(terms[i].term)
            if slot < 0:
                continue
            st = &self.terms[slot]
            self._push(self._node_bound(h, terms, i, &self.nodes[st.group0]), st.group0, i, LEVEL_NODE)
            self._push_entry_items(h, terms, i, st)
        while self.queue.size():
            if self.best.size() == cap and self.queue[0].key < self.best[0].score:
                break
            it = self._pop()
            self.n_items += 1
            if it.level == LEVEL_ENTRY:
                self._score_entry_item(h, terms, &it, cap)
                continue
            at = it.pos
            while True:
                nd = &self.nodes[at]
                if nd.child == 0:
                    self._score_block(h, terms, it.qterm, nd.first, nd.first + nd.count, cap)
                    break
                kl = self._node_bound(h, terms, it.qterm, &self.nodes[nd.child])
                kr = self._node_bound(h, terms, it.qterm, &self.nodes[nd.child + 1])
                if kl >= kr:
                    better, other, kb, ko = nd.child, nd.child + 1, kl, kr
                else:
                    better, other, kb, ko = nd.child + 1, nd.child, kr, kl
                if self.best.size() < cap or ko >= self.best[0].score:
                    self._push(ko, other, it.qterm, LEVEL_NODE)
                if self.best.size() == cap and kb < self.best[0].score:
                    break
                if self.queue.size() and self.queue[0].key > kb:
                    self._push(kb, better, it.qterm, LEVEL_NODE)
                    break
                self.n_descents += 1
                at = better
        self._emit(out)

    cdef void _push_entry_items(self, const SubHotC* h, const SubTermC* terms, int qi,
                                const STermC* st) noexcept nogil:
        """regsearch's entry items (entries of term qi's list that may hold a later term of s),
        with a tighter bound: such a message holds none of s's earlier terms (it is designated to
        qi) and, of its later terms, at most those whose bits its mask has, so by Cauchy-Schwarz
        on them TSim <= w(qi,s) * w + |(w(t_j,s)) for later j with a bit in the mask| *
        sqrt(1 - w^2): the message's other weights have norm sqrt(1 - w^2)."""
        cdef uint64_t p
        cdef size_t c
        cdef const SEntryC* e
        cdef int j, nq = h.nterms
        cdef double r2, other, tub
        cdef seq_t oldest = self.window.oldest_seq
        if qi + 1 >= nq:
            return
        self._scan_entry_items(qi, nq, st)
        if PREFETCH_ITEMS:
            # the items' masks (read below) and, as most entry items are popped and read from
            # the window (two dependent misses: the record, then its terms), their records: all
            # the loads started at once, not one after the other
            for c in range(self.cand.size()):
                p = self.cand[c]
                prefetch(&self.masks[p])
                prefetch(win_get(self.window, oldest + <uint32_t>(self.entries[p].seq_lo - <uint32_t>oldest)))
        for c in range(self.cand.size()):
            p = self.cand[c]
            e = &self.entries[p]
            r2 = 0.0
            for j in range(qi + 1, nq):
                if holds_bits(&self.masks[p], &self.q_bits[j]):
                    r2 += terms[j].w * terms[j].w
            other = 1.0 + NORM_SLACK - e.w * e.w
            other = sqrt(other) if other > 0.0 else 0.0
            tub = terms[qi].w * e.w + sqrt(r2) * other
            if tub > 1.0:
                tub = 1.0
            self.n_entry_items += 1
            self._push(combine(h.alpha, spatial_sim(h.x, h.y, e.x, e.y, self.max_dist), tub) + BOUND_SLACK,
                       <uint32_t>p, qi, LEVEL_ENTRY)
        if PREFETCH_ITEMS > 1:
            for c in range(self.cand.size()):
                prefetch(win_terms(self.window, win_get(
                    self.window, oldest + <uint32_t>(self.entries[self.cand[c]].seq_lo - <uint32_t>oldest))))

    # ------------------------------------------------------------------ Python access
    def memory_bytes(self):
        return RegistrationIndex.memory_bytes(self) + self.nodes.capacity() * sizeof(TNodeC)

    def stats(self):
        out = RegistrationIndex.stats(self)
        out["nodes"] = self.nodes.size()
        out["descents"] = self.n_descents
        out["index_bytes"] = self.memory_bytes()     # a transient: dropped after the batch
        return out


def set_runs_at_once(uint64_t n):
    """Set the runs ``search_register`` holds at once (a test hook: a small figure forces many
    parts; at least 1); returns the previous figure."""
    global RUNS_AT_ONCE
    cdef uint64_t before = RUNS_AT_ONCE
    RUNS_AT_ONCE = n if n > 0 else 1
    return before


def set_prefetch_items(int n):
    """Set the prefetch of the entry items' window reads (an A/B hook); returns the previous one."""
    global PREFETCH_ITEMS
    cdef int before = PREFETCH_ITEMS
    PREFETCH_ITEMS = n
    return before


def set_search_order(int n):
    """Order a bulk batch by term and place (1, the default) or keep it as given (0): an A/B
    hook; returns the previous setting."""
    global SEARCH_ORDER
    cdef int before = SEARCH_ORDER
    SEARCH_ORDER = n
    return before


cdef void sort_searches(SubTable table, const sid_t* sids, uint64_t* at, size_t n, bint by_place) noexcept nogil:
    """Sort at[0:n] (indices into sids) by the subscription's most frequent term (terms are
    sorted by id, ids by document frequency: its last), then by_place by the Z-order of its
    location (over the bounding box of these n), then by index."""
    cdef vector[pair[uint64_t, uint64_t]] keyed
    cdef double minx = 1e300, maxx = -1e300, miny = 1e300, maxy = -1e300, sx, sy
    cdef uint64_t z, key
    cdef size_t r
    cdef const SubHotC* h
    if by_place:
        for r in range(n):
            h = &table.hot[sids[at[r]]]
            minx = h.x if h.x < minx else minx
            maxx = h.x if h.x > maxx else maxx
            miny = h.y if h.y < miny else miny
            maxy = h.y if h.y > maxy else maxy
    sx = 65535.0 / (maxx - minx) if maxx > minx else 0.0
    sy = 65535.0 / (maxy - miny) if maxy > miny else 0.0
    keyed.reserve(n)
    for r in range(n):
        h = &table.hot[sids[at[r]]]
        z = 0
        if by_place:
            z = spread16(<uint32_t>((h.x - minx) * sx)) | (<uint64_t>spread16(<uint32_t>((h.y - miny) * sy)) << 1)
        key = ((<uint64_t>table.terms[h.term_off + h.nterms - 1].term << 32) | z) if h.nterms else z
        keyed.push_back(pair[uint64_t, uint64_t](key, at[r]))
    std_sort(keyed.begin(), keyed.end())
    for r in range(n):
        at[r] = keyed[r].second


cdef void order_batch(SubTable table, vector[sid_t]& sids) noexcept nogil:
    """Order a bulk batch (before its passes, for the replay and the search alike) by the
    subscriptions' most frequent term, then by the Z-order of their location: consecutive
    searches share that term's tree, and near ones its paths; a pass then holds whole terms.
    The runs do not depend on the order; both paths build the buffers in it (``SEARCH_ORDER``
    0: kept as given)."""
    cdef vector[uint64_t] at
    cdef vector[sid_t] given
    cdef size_t i, n = sids.size()
    if SEARCH_ORDER == 0 or n < 2:
        return
    at.resize(n)
    for i in range(n):
        at[i] = i
    sort_searches(table, sids.data(), at.data(), n, True)
    given = sids
    for i in range(n):
        sids[i] = given[at[i]]


cdef uint64_t search_register(Buffers b, RegistrationTree idx, SubTable table, const sid_t* sids,
                              size_t n, double* build_ns) noexcept nogil:
    """Initialise the buffers of sids[0:n] (in the table, in no index) from runs found by
    search (``idx`` built over their terms), in the order given, in parts whose runs fit in
    ``RUNS_AT_ONCE`` (the runs vector is reserved to its part's bound: no doubling).  In a part
    the searches run in the order of the subscriptions' most frequent term (their lists stay in
    cache; a batch ordered by ``order_batch`` already is), the buffers are then built in the
    given order.  Returns the (s, m) pairs scored; adds the build time to build_ns."""
    cdef vector[uint64_t] order
    cdef vector[RankedC] runs
    cdef vector[uint64_t] start, length
    cdef vector[uint32_t] caps
    cdef size_t i, r, lo = 0, hi
    cdef sid_t sid
    cdef const SubHotC* h
    cdef uint64_t before = idx.n_scored, bound
    cdef double t0
    start.resize(n)
    length.resize(n)
    caps.resize(n)
    for i in range(n):
        caps[i] = bulk_capacity(b, table.hot[sids[i]].k)
    while lo < n:
        hi = lo
        bound = 0
        while hi < n and (hi == lo or bound + caps[hi] <= RUNS_AT_ONCE):
            bound += caps[hi]
            hi += 1
        order.clear()
        for i in range(lo, hi):
            order.push_back(i)
        sort_searches(table, sids, order.data(), hi - lo, False)
        runs.clear()
        runs.reserve(bound)
        for r in range(order.size()):
            i = <size_t>order[r]
            sid = sids[i]
            h = &table.hot[sid]
            start[i] = runs.size()
            idx.top_c(h, &table.terms[h.term_off], caps[i], &runs)
            length[i] = runs.size() - start[i]
        t0 = now_ns()
        for i in range(lo, hi):
            sid = sids[i]
            table.hot[sid].theta = 0.0
            table.theta_idx[sid] = 0.0
            b.init_sub_from(sid, runs.data() + start[i], length[i], length[i] == caps[i])
        build_ns[0] += now_ns() - t0
        lo = hi
    return idx.n_scored - before
