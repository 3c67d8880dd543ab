# cython: language_level=3
"""Scan-only cone trees (issue 35, step C; ``bench/scan_cone.py --timed``, through
``disseminate_only``): not an engine index yet, a static structure built from a subscription
table's current thresholds, to count and time the cone-bounded scan against the block index's on
the same state.

The cone (docs/engine.md, "The cone of a single-term posting"): a subscription s sharing exactly
one term t with the message m, 0 < alpha < 1, qualifies iff d(s, m) <= D * lam * (w_m - rho), with
rho = ((theta - alpha) / (1 - alpha)) / w and lam = w (1 - alpha) / alpha (lam = +inf at alpha = 0).

Layout.  Per term, the postings of subscriptions with at most MAX_PAIR_TERMS terms and alpha < 1
form a k-d tree: the split is on the widest of x, y and RHO_SCALE * rho (rho clipped to [-1, 2]
for the split only), halves rounded to whole leaves, nodes in DFS order with the right child's
index stored.  Postings keep f32 copies: location to nearest, rho rounded down, lam rounded up; a
node holds its members' box, rho_min and lam_max over those copies.  A node is skipped when
w_m - rho_min + NODE_SLACK (1 + |rho_min|) < 0 or MINDIST - pos_slack > D lam_max (that slack'd
margin) (1 + NODE_SLACK) + NODE_SLACK D: pos_slack = max|coordinate| * 2^-23 covers the f32
locations, NODE_SLACK the double arithmetic that made rho and lam (~1e-15).
The tree is walked level by level (children and leaves prefetched together); a leaf's postings
take the same test one by one, and survivors that share no other term with m are verified
exactly, together at the end of the message (records prefetched ahead).  A subscription sharing
two or more terms with m is found by the pair index ((t, u) -> sids, t < u; open addressing, each
entry with the subscription's third term) and verified once, at its first two common terms.
Postings of alpha = 1 and of subscriptions with more than MAX_PAIR_TERMS terms sit in a flat
per-term list, read whole, each verified at its first common term.  Invariant: every qualifying
subscription is verified exactly once (tests/test_scan_cone.py compares the candidates with the block index's).
"""
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libcpp.algorithm cimport sort as std_sort
from libcpp.utility cimport pair
from libc.math cimport INFINITY, sqrt, fabs
from libc.stdint cimport uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, MsgTermC, SubTermC, prefetch
from skype._core.scoring cimport round_up, round_down
from skype._core.subindex cimport SubscriptionIndex, SubTable, SubHotC

cdef extern from *:
    """
    #include <utility>
    template <class It> static inline auto skype_second(It it) -> decltype(it->second) { return it->second; }
    """
    uint32_t pair_second "skype_second"(unordered_map[term_t, uint32_t].iterator it) noexcept nogil


cdef double NODE_SLACK = 1e-9
cdef int MAX_PAIR_TERMS = 3
cdef size_t VERIFY_AHEAD = 8            # records prefetched ahead in the verification loop
cdef uint32_t NO_KIDS = 0xFFFFFFFF
cdef term_t NO_TERM = 0xFFFFFFFF
cdef uint64_t PAIR_EMPTY = 0xFFFFFFFFFFFFFFFF
cdef uint64_t PAIR_HASH = 0x9E3779B97F4A7C15


cdef inline bint in_msg(const MsgTermC* m, int n, term_t t) noexcept nogil:
    """Is t among the message's terms (ascending)?"""
    cdef int lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if m[mid].term < t:
            lo = mid + 1
        else:
            hi = mid
    return lo < n and m[lo].term == t


cdef struct ConePostC:
    sid_t sid
    term_t other0            # the subscription's other terms (NO_TERM pads): the first-meeting
    term_t other1            # check without reading the table
    float x                  # location, nearest f32 (distances allow pos_slack)
    float y
    float rho                # rounded down
    float lam                # rounded up (+inf at alpha = 0)


cdef struct ConeNodeC:         # 36 bytes: bounds over the members' stored (f32) fields
    float minx
    float miny
    float maxx
    float maxy
    float rho_min
    float lam_max
    uint32_t lo              # members: posts[lo, hi) of the term's array
    uint32_t hi
    uint32_t right           # the right child's index (the left is the next node); NO_KIDS: a leaf


cdef struct PairSlotC:          # open addressing, linear probing: one line per probe
    uint64_t key             # t << 32 | u, t < u; PAIR_EMPTY: a free slot
    uint32_t start           # its entries: pents[start, end)
    uint32_t end


cdef struct PairEntC:
    sid_t sid
    term_t third             # the subscription's third term (NO_TERM: two terms)


cdef struct ConeTermC:
    vector[ConePostC] posts
    vector[ConeNodeC] nodes
    vector[sid_t] flat       # alpha = 1 or more than MAX_PAIR_TERMS terms: read whole


cdef inline double split_key(const ConePostC* p, int dim, double rho_scale) noexcept nogil:
    cdef double r
    if dim == 0:
        return p.x
    if dim == 1:
        return p.y
    r = p.rho
    if r < -1.0:
        r = -1.0
    elif r > 2.0:
        r = 2.0
    return r * rho_scale


cdef inline bint may_hold(double minx, double miny, double maxx, double maxy, double rho_min,
                          double lam_max, double x, double y, double wm, double max_dist,
                          double pos_slack) noexcept nogil:
    """False only if no posting with rho >= rho_min and lam <= lam_max in the box qualifies
    (the box of f32 locations: a true location is within pos_slack of it)."""
    cdef double s = wm - rho_min + NODE_SLACK * (1.0 + fabs(rho_min))
    cdef double dx = 0.0, dy = 0.0
    if s < 0.0:
        return False
    if lam_max == INFINITY:
        return True
    if x < minx:
        dx = minx - x
    elif x > maxx:
        dx = x - maxx
    if y < miny:
        dy = miny - y
    elif y > maxy:
        dy = y - maxy
    return sqrt(dx * dx + dy * dy) - pos_slack <= max_dist * lam_max * s * (1.0 + NODE_SLACK) + NODE_SLACK * max_dist


cdef class ConeScan(SubscriptionIndex):
    cdef unordered_map[term_t, uint32_t] term_slot
    cdef vector[ConeTermC] terms
    cdef vector[PairSlotC] pslots
    cdef vector[sid_t] pending          # this message's survivors, verified together at the end
    cdef vector[PairEntC] pents
    cdef uint64_t pmask
    cdef int pshift
    cdef int leaf
    cdef double rho_scale
    cdef double pos_slack              # >= the distance error of f32 locations: max|coordinate| * 2^-23
    cdef public uint64_t nodes_tested, pair_entries_read, flat_read, tree_read

    def __cinit__(self, SubTable table, double max_dist, int leaf=8, double rho_scale=100.0):
        self.table = table
        self.max_dist = max_dist
        self.leaf = leaf if leaf >= 1 else 1
        self.rho_scale = rho_scale

    cdef uint32_t _slot(self, term_t t) noexcept nogil:
        cdef unordered_map[term_t, uint32_t].iterator it = self.term_slot.find(t)
        cdef ConeTermC fresh
        if it != self.term_slot.end():
            return pair_second(it)
        self.term_slot[t] = <uint32_t>self.terms.size()
        self.terms.push_back(fresh)
        return <uint32_t>(self.terms.size() - 1)

    def build(self):
        """Postings, trees and the pair index from the table's live subscriptions and current
        thresholds (sids ascending within each term, as bench/scan_cone.py's model)."""
        cdef sid_t sid
        cdef const SubHotC* h
        cdef const SubTermC* st
        cdef int i, j
        cdef ConePostC p
        cdef double reach = 0.0
        cdef ConeTermC* ct
        cdef size_t k, a, b, cap
        cdef PairEntC pe
        cdef vector[pair[uint64_t, uint32_t]] keyed
        cdef vector[PairEntC] ents
        cdef uint64_t slot
        with nogil:
            self.terms.clear()
            self.term_slot.clear()
            self.pslots.clear()
            self.pents.clear()
            keyed.clear()
            for sid in range(<sid_t>self.table.hot.size()):
                h = &self.table.hot[sid]
                if not h.alive:
                    continue
                st = &self.table.terms[h.term_off]
                for i in range(h.nterms):
                    ct = &self.terms[self._slot(st[i].term)]
                    if h.alpha >= 1.0 or h.nterms > MAX_PAIR_TERMS:
                        ct.flat.push_back(sid)
                        continue
                    p.sid = sid
                    p.other0 = NO_TERM
                    p.other1 = NO_TERM
                    for j in range(h.nterms):
                        if j != i:
                            if p.other0 == NO_TERM:
                                p.other0 = st[j].term
                            else:
                                p.other1 = st[j].term
                    p.x = <float>h.x
                    p.y = <float>h.y
                    p.rho = round_down(((h.theta - h.alpha) / (1.0 - h.alpha)) / st[i].w)
                    p.lam = round_up(st[i].w * (1.0 - h.alpha) / h.alpha) if h.alpha > 0.0 else INFINITY
                    reach = max(reach, fabs(h.x), fabs(h.y))
                    ct.posts.push_back(p)
                if h.alpha < 1.0 and h.nterms <= MAX_PAIR_TERMS:     # the tree's subscriptions only
                    for i in range(h.nterms):
                        for j in range(i + 1, h.nterms):
                            pe.sid = sid
                            pe.third = NO_TERM
                            if h.nterms == 3:
                                pe.third = st[3 - i - j].term
                            keyed.push_back(pair[uint64_t, uint32_t]((<uint64_t>st[i].term << 32) | st[j].term,
                                                                     <uint32_t>ents.size()))
                            ents.push_back(pe)
            std_sort(keyed.begin(), keyed.end())
            cap = 16
            while cap < 2 * keyed.size():
                cap *= 2
            self.pmask = cap - 1
            self.pshift = 64
            k = cap
            while k > 1:
                k >>= 1
                self.pshift -= 1
            self.pslots.resize(cap)
            for k in range(cap):
                self.pslots[k].key = PAIR_EMPTY
            a = 0
            while a < keyed.size():
                b = a
                while b < keyed.size() and keyed[b].first == keyed[a].first:
                    self.pents.push_back(ents[keyed[b].second])
                    b += 1
                slot = (keyed[a].first * PAIR_HASH) >> self.pshift
                while self.pslots[slot].key != PAIR_EMPTY:
                    slot = (slot + 1) & self.pmask
                self.pslots[slot].key = keyed[a].first
                self.pslots[slot].start = <uint32_t>a
                self.pslots[slot].end = <uint32_t>b
                a = b
            self.pos_slack = reach / 8388608.0
            for k in range(self.terms.size()):
                ct = &self.terms[k]
                if ct.posts.size():
                    self._build_node(ct, 0, <uint32_t>ct.posts.size())

    cdef void _build_node(self, ConeTermC* ct, uint32_t lo, uint32_t hi) noexcept nogil:
        cdef ConeNodeC nd
        cdef uint32_t i, half, n = hi - lo, me
        cdef double sx, sy, sr, kmin, kmax
        cdef int dim
        cdef vector[pair[double, uint32_t]] keyed
        cdef vector[ConePostC] tmp
        cdef const ConePostC* p
        nd.minx = INFINITY
        nd.miny = INFINITY
        nd.maxx = -INFINITY
        nd.maxy = -INFINITY
        nd.rho_min = INFINITY
        nd.lam_max = -INFINITY
        kmin = INFINITY
        kmax = -INFINITY
        for i in range(lo, hi):
            p = &ct.posts[i]
            nd.minx = min(nd.minx, p.x)
            nd.miny = min(nd.miny, p.y)
            nd.maxx = max(nd.maxx, p.x)
            nd.maxy = max(nd.maxy, p.y)
            nd.rho_min = min(nd.rho_min, p.rho)      # stored values: already rounded outward
            nd.lam_max = max(nd.lam_max, p.lam)
            sr = split_key(p, 2, self.rho_scale)
            kmin = min(kmin, sr)
            kmax = max(kmax, sr)
        nd.lo = lo
        nd.hi = hi
        nd.right = NO_KIDS
        me = <uint32_t>ct.nodes.size()
        ct.nodes.push_back(nd)
        if n <= <uint32_t>self.leaf:
            return
        sx = nd.maxx - nd.minx
        sy = nd.maxy - nd.miny
        sr = kmax - kmin
        dim = 0
        if sy > sx:
            dim = 1
        if sr > (sy if dim == 1 else sx):
            dim = 2
        for i in range(lo, hi):
            keyed.push_back(pair[double, uint32_t](split_key(&ct.posts[i], dim, self.rho_scale), i - lo))
        std_sort(keyed.begin(), keyed.end())   # (key, position): ties keep the array order
        for i in range(n):
            tmp.push_back(ct.posts[lo + keyed[i].second])
        for i in range(n):
            ct.posts[lo + i] = tmp[i]
        half = ((n // 2 + <uint32_t>self.leaf - 1) // <uint32_t>self.leaf) * <uint32_t>self.leaf
        if half < <uint32_t>self.leaf:
            half = <uint32_t>self.leaf
        if half > n - 1:
            half = n - 1
        self._build_node(ct, lo, lo + half)
        ct.nodes[me].right = <uint32_t>ct.nodes.size()
        self._build_node(ct, lo + half, hi)

    cdef inline bint _shares_other(self, const ConePostC* p, const MsgTermC* m, int n) noexcept nogil:
        """Does the posting's subscription share a term other than the posting's with m?"""
        cdef int j
        if p.other0 == NO_TERM:
            return False
        for j in range(n):
            if m[j].term == p.other0 or m[j].term == p.other1:
                return True
        return False

    cdef bint _first_common(self, sid_t sid, term_t t, const MsgTermC* m, int n, term_t* second) noexcept nogil:
        """Is t the first common term of s and m?  second: the next common term (or t)."""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef const SubTermC* st = &self.table.terms[h.term_off]
        cdef int i = 0, j = 0, seen = 0
        second[0] = t
        while i < h.nterms and j < n:
            if st[i].term == m[j].term:
                if seen == 0 and st[i].term != t:
                    return False
                if seen == 1:
                    second[0] = st[i].term
                    return True
                seen += 1
                i += 1
                j += 1
            elif st[i].term < m[j].term:
                i += 1
            else:
                j += 1
        return seen >= 1

    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        cdef int q, r
        cdef uint32_t ni, i
        cdef term_t second
        cdef unordered_map[term_t, uint32_t].iterator it
        cdef uint64_t key, slot
        cdef const PairEntC* pe
        cdef ConeTermC* ct
        cdef const ConeNodeC* nd
        cdef const ConePostC* p
        cdef vector[uint32_t] level, following, leaves
        cdef size_t li
        cdef double wm
        cdef size_t e
        self.out.clear()
        self.pending.clear()
        self.ctr.messages += 1
        for q in range(n):
            it = self.term_slot.find(m[q].term)
            if it == self.term_slot.end():
                continue
            ct = &self.terms[pair_second(it)]
            wm = m[q].w
            for e in range(ct.flat.size()):            # alpha = 1 or many terms: each at its first common term
                self.flat_read += 1
                self.ctr.entries_visited += 1
                if self._first_common(ct.flat[e], m[q].term, m, n, &second):
                    self.pending.push_back(ct.flat[e])
            if not ct.nodes.size():
                continue
            # level by level: every passing node's children (and every passing leaf's postings)
            # are prefetched together, so that their misses overlap
            level.clear()
            level.push_back(0)
            leaves.clear()
            while level.size():
                following.clear()
                for li in range(level.size()):
                    ni = level[li]
                    nd = &ct.nodes[ni]
                    self.nodes_tested += 1
                    if not may_hold(nd.minx, nd.miny, nd.maxx, nd.maxy, nd.rho_min, nd.lam_max, x, y, wm,
                                    self.max_dist, self.pos_slack):
                        continue
                    if nd.right != NO_KIDS:
                        prefetch(&ct.nodes[ni + 1])
                        prefetch(&ct.nodes[nd.right])
                        following.push_back(ni + 1)
                        following.push_back(nd.right)
                    else:
                        prefetch(&ct.posts[nd.lo])
                        prefetch(<const char*>&ct.posts[nd.lo] + 64)
                        prefetch(<const char*>&ct.posts[nd.hi - 1])
                        leaves.push_back(ni)
                level.swap(following)
            for li in range(leaves.size()):
                nd = &ct.nodes[leaves[li]]
                for i in range(nd.lo, nd.hi):
                    p = &ct.posts[i]
                    self.tree_read += 1
                    self.ctr.entries_visited += 1
                    if not may_hold(p.x, p.y, p.x, p.y, p.rho, p.lam, x, y, wm, self.max_dist, self.pos_slack):
                        continue
                    if self._shares_other(p, m, n):
                        continue                       # the pair index decides it
                    self.pending.push_back(p.sid)
        for q in range(n):                             # subscriptions sharing two or more terms
            for r in range(q + 1, n):
                key = (<uint64_t>m[q].term << 32) | m[r].term
                slot = (key * PAIR_HASH) >> self.pshift
                while self.pslots[slot].key != key and self.pslots[slot].key != PAIR_EMPTY:
                    slot = (slot + 1) & self.pmask
                if self.pslots[slot].key == PAIR_EMPTY:
                    continue
                for e in range(self.pslots[slot].start, self.pslots[slot].end):
                    pe = &self.pents[e]
                    self.pair_entries_read += 1
                    self.ctr.entries_visited += 1
                    # verified at its first two common terms: here unless its third term is in m below u
                    if pe.third == NO_TERM or pe.third > m[r].term or not in_msg(m, n, pe.third):
                        self.pending.push_back(pe.sid)

        self._verify_pending(m, n, x, y)

    cdef void _verify_pending(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        """The survivors verified in a row, records prefetched VERIFY_AHEAD ahead (as the block
        index does), so that their misses overlap."""
        cdef const SubHotC* hot = self.table.hot.data()
        cdef size_t i, c = self.pending.size()
        cdef const sid_t* sids = self.pending.data()
        for i in range(c):
            if i + VERIFY_AHEAD < c:
                prefetch(&hot[sids[i + VERIFY_AHEAD]])
            if i + VERIFY_AHEAD // 2 < c:
                prefetch(&self.table.terms[hot[sids[i + VERIFY_AHEAD // 2]].term_off])
            self._verify(sids[i], x, y, m, n)

    cdef size_t memory(self) noexcept nogil:
        cdef size_t total = 0, k
        for k in range(self.terms.size()):
            total += (self.terms[k].posts.capacity() * sizeof(ConePostC)
                      + self.terms[k].nodes.capacity() * sizeof(ConeNodeC)
                      + self.terms[k].flat.capacity() * sizeof(sid_t))
        return total + self.pslots.capacity() * sizeof(PairSlotC) + self.pents.capacity() * sizeof(PairEntC)
