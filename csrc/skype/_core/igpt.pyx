# cython: language_level=3
"""IGPT, the paper's subscription index (spec §3), and IPT (IGPT without group pruning).

The subscription table and the verification every index shares are in subindex.pyx.

Index.  A quadtree over subscription locations (leaves split at ``leaf_capacity``); every leaf
has an inverted file term -> posting list.  The posting lists are stored *term-major*: for each
term, one array holds the lists of every leaf containing the term, leaf after leaf, so that an
arriving message visits exactly the (term, leaf) lists of its own terms.  Each list is divided
into G alpha-groups (global alpha quantiles), each group sorted by ``a_s = theta_s / (1 -
alpha_s)`` ascending and carrying, from each position r to the group's end, the suffix maxima
``MW(g_r)`` of ``maxwt(s, pos_s(t))`` and ``B(g_r)`` of ``b_s = alpha_s / (1 - alpha_s)``.  Each
quadtree node keeps ``theta_S``, the minimum of the spatial thresholds of its subtree.

Invariants (every pruning rule relies on them):
* stored ``a`` values and every ``theta_S`` are lower bounds of the true values (computed from
  ``theta_idx <= theta`` and rounded down); stored ``mw`` and ``b`` are upper bounds (rounded up).
  A threshold decrease is applied at once; an increase is applied lazily.
* a subscription with alpha >= 1 - 1e-6 stores a = -inf (its text part is irrelevant to the
  group rules, which never prune it; individual rules still apply).
* a subscription appears exactly once in the list of (t, its leaf) for each of its terms t.

Dissemination (Algorithm 1, term-major).  For each term t_j of the message (rarest first), for
each leaf with a list for t_j: cell pruning, then per group: group skipping and early
termination; then per member not yet met by this message: a first-meeting test from the
posting entry alone, and for survivors the individual tests (prefix filtering, the
unseen-keywords bound, with the exact or the Def. 8 spatial bound) and the exact score from the
two full term lists.  Each subscription is decided at its first meeting (see ``_visit``).  A
rule only skips on an upper bound strictly below the threshold by EPS = 1e-9; the safety
argument of each rule is next to its code.
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, uint32_t
from libc.string cimport memset
from skype._core.types cimport term_t, sid_t, RectC, SubTermC, MsgTermC, prefetch, PREFETCH_AHEAD
from skype._core.subindex cimport SubscriptionIndex, SubTable, SubHotC, CountersC, SID_BITS
from skype._core.scoring cimport (mindist, inner_dist, combine, rect_contains, quadrant, child_rect, round_up,
                                  round_down, spatial_sim)

cdef enum:
    DECIDED = -2           # candidate state: the subscription was decided at its first meeting
    SMALL_LIST = 4         # lists this short are scanned without the group rules
cdef uint32_t EMPTY_SLOT = 0xFFFFFFFFu
cdef uint32_t SID_MASK = (1u << SID_BITS) - 1
cdef double EPS = 1e-9
cdef double ALPHA_TEXT_LIMIT = 1.0 - 1e-6


cdef inline double suffix_max(const SubTermC* st, int i, int n) noexcept nogil:
    """maxwt(s, i): the largest weight from position i on."""
    cdef double m = 0.0
    while i < n:
        if st[i].w > m:
            m = st[i].w
        i += 1
    return m


cdef struct BuildC:                 # one posting during a bulk build
    term_t term
    uint32_t leaf
    uint32_t sid_group
    float a
    int pos


cdef bint build_less(const BuildC& p, const BuildC& q) noexcept nogil:
    if p.term != q.term:
        return p.term < q.term
    if p.leaf != q.leaf:
        return p.leaf < q.leaf
    if (p.sid_group >> SID_BITS) != (q.sid_group >> SID_BITS):
        return (p.sid_group >> SID_BITS) < (q.sid_group >> SID_BITS)
    if p.a != q.a:
        return p.a < q.a
    return p.sid_group < q.sid_group


cdef class IGPTIndex(SubscriptionIndex):
    def __cinit__(self, SubTable table, double minx, double miny, double maxx, double maxy,
                  double max_dist, uint32_t leaf_capacity=1000, int ngroups=10,
                  bint cell=True, bint group=True, bint early=True, bint entry=True, bint prefix=True,
                  bint spatial=True, bint unseen=True, bint exact_spatial=True, int cell_walk=2,
                  double theta_refresh=0.02,
                  uint32_t max_depth=24):
        cdef int g
        self.table = table
        self.bounds = RectC(minx, miny, maxx, maxy)
        self.max_dist = max_dist
        self.leaf_capacity = leaf_capacity
        self.max_depth = max_depth
        self.ngroups = ngroups
        for g in range(1, ngroups):
            self.group_bounds.push_back(<double>g / ngroups)
        self.rule_cell = cell
        self.rule_group = group
        self.rule_early = early
        self.rule_entry = entry
        self.rule_prefix = prefix
        self.rule_spatial = spatial
        self.rule_unseen = unseen
        self.rule_exact_spatial = exact_spatial
        self.cell_walk = cell_walk
        self.theta_refresh = theta_refresh
        self.posting_count = 0
        self.stamp = 0
        memset(&self.ctr, 0, sizeof(CountersC))
        self._new_leaf_node(self.bounds, -1, 0)

    # ------------------------------------------------------------------ per-subscription values
    cdef inline int _group_of(self, double alpha) noexcept nogil:
        cdef int g = 0
        while g < <int>self.group_bounds.size() and alpha >= self.group_bounds[g]:
            g += 1
        return g

    cdef inline void _own_text(self, sid_t sid, int pos, PEntryC* e) noexcept nogil:
        """The entry's copy of w(s, pos) and wtsum(s, pos + 1), rounded up."""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef const SubTermC* st = &self.table.terms[h.term_off]
        e.own_w = round_up(st[pos].w)
        e.own_rest = st[pos + 1].wtsum if pos + 1 < h.nterms else 0.0

    cdef inline float _a_of(self, sid_t sid) noexcept nogil:
        cdef double alpha = self.table.hot[sid].alpha
        if alpha >= ALPHA_TEXT_LIMIT:
            return -INFINITY
        return round_down(self.table.theta_idx[sid] / (1.0 - alpha))

    cdef inline float _b_of(self, sid_t sid) noexcept nogil:
        cdef double alpha = self.table.hot[sid].alpha
        if alpha >= ALPHA_TEXT_LIMIT:
            return 0.0
        return round_up(alpha / (1.0 - alpha))

    cdef inline double _theta_s_of(self, sid_t sid) noexcept nogil:
        """Spatial threshold theta_S(s) = (theta - (1 - alpha)) / alpha (Eq. 8), with EPS folded
        in and rounded down: SSim < theta_S(s) implies ST < theta - EPS.  -inf for alpha = 0."""
        cdef double alpha = self.table.hot[sid].alpha, v
        if alpha <= 0.0:
            return -INFINITY
        v = (self.table.theta_idx[sid] - EPS - (1.0 - alpha)) / alpha
        return v - 1e-12 * (1.0 + (v if v > 0 else -v))

    # ------------------------------------------------------------------ quadtree
    cdef int32_t _new_leaf_node(self, RectC rect, int32_t parent, uint32_t depth) noexcept nogil:
        cdef QNodeC node
        cdef int32_t leaf = <int32_t>self.leaf_node.size()
        node.rect = rect
        node.child = -1
        node.parent = parent
        node.leaf = leaf
        node.depth = depth
        node.theta_s = INFINITY
        self.nodes.push_back(node)
        self.leaf_node.push_back(<int32_t>self.nodes.size() - 1)
        self.leaf_subs.resize(leaf + 1)
        self.leaf_raises.push_back(0)
        self.leaf_stamp.push_back(0)
        self.leaf_osb.push_back(0)
        self.leaf_dout.push_back(0)
        self.leaf_pruned.push_back(0)
        return leaf

    cdef uint32_t _find_leaf(self, double x, double y) noexcept nogil:
        cdef int32_t n = 0
        while self.nodes[n].child >= 0:
            n = self.nodes[n].child + quadrant(&self.nodes[n].rect, x, y)
        return <uint32_t>self.nodes[n].leaf

    cdef void _lower_theta_s(self, uint32_t leaf, double v) noexcept nogil:
        """A leaf statistic fell to v: lower it and its ancestors at once."""
        cdef int32_t n = self.leaf_node[leaf]
        while n >= 0 and self.nodes[n].theta_s > v:
            self.nodes[n].theta_s = v
            n = self.nodes[n].parent

    cdef void _recompute_theta_s(self, uint32_t leaf) noexcept nogil:
        """Exact leaf minimum (taking deferred raises), then ancestors as min of children."""
        cdef int32_t n = self.leaf_node[leaf], p
        cdef double v = INFINITY, t
        cdef size_t i
        cdef int q
        for i in range(self.leaf_subs[leaf].size()):
            t = self._theta_s_of(self.leaf_subs[leaf][i])
            if t < v:
                v = t
        self.nodes[n].theta_s = v
        self.leaf_raises[leaf] = 0
        p = self.nodes[n].parent
        while p >= 0:
            v = INFINITY
            for q in range(4):
                if self.nodes[self.nodes[p].child + q].theta_s < v:
                    v = self.nodes[self.nodes[p].child + q].theta_s
            self.nodes[p].theta_s = v
            p = self.nodes[p].parent

    cdef void _split(self, uint32_t leaf, bint with_postings) noexcept nogil:
        cdef int32_t n = self.leaf_node[leaf]
        cdef int32_t first = <int32_t>self.nodes.size()
        cdef uint32_t child_leaf[4]
        cdef RectC rect, parent_rect = self.nodes[n].rect
        cdef uint32_t depth = self.nodes[n].depth + 1
        cdef int q
        cdef size_t i
        cdef sid_t sid
        cdef vector[sid_t] subs
        for q in range(4):
            child_rect(&parent_rect, q, &rect)
            child_leaf[q] = self._new_leaf_node(rect, n, depth)
        self.nodes[n].child = first
        self.nodes[n].leaf = -1
        self.leaf_node[leaf] = -1
        subs.swap(self.leaf_subs[leaf])
        for i in range(subs.size()):
            sid = subs[i]
            q = quadrant(&parent_rect, self.table.hot[sid].x, self.table.hot[sid].y)
            self.table.hot[sid].leaf = child_leaf[q]
            self.leaf_subs[child_leaf[q]].push_back(sid)
        if with_postings:
            self._split_postings(leaf, child_leaf, subs)
        for q in range(4):
            self._recompute_theta_s(child_leaf[q])
        for q in range(4):
            if self.leaf_subs[child_leaf[q]].size() > self.leaf_capacity and depth < self.max_depth:
                self._split(child_leaf[q], with_postings)

    cdef void _tree_insert(self, sid_t sid, bint with_postings) noexcept nogil:
        cdef uint32_t leaf = self._find_leaf(self.table.hot[sid].x, self.table.hot[sid].y)
        self.table.hot[sid].leaf = leaf
        self.leaf_subs[leaf].push_back(sid)
        self._lower_theta_s(leaf, self._theta_s_of(sid))
        if with_postings:
            self._insert_postings(sid)
        if self.leaf_subs[leaf].size() > self.leaf_capacity and self.nodes[self.leaf_node[leaf]].depth < self.max_depth:
            self._split(leaf, with_postings)

    # ------------------------------------------------------------------ posting lists
    cdef inline size_t _pl_index(self, TermPostC* tp, uint32_t leaf) noexcept nogil:
        """Index of leaf's list in tp.pls, or where it would be inserted."""
        cdef size_t lo = 0, hi = tp.pls.size(), mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if tp.pls[mid].leaf < leaf:
                lo = mid + 1
            else:
                hi = mid
        return lo

    cdef inline size_t _seg_end(self, TermPostC* tp, size_t i) noexcept nogil:
        return tp.pls[i + 1].start if i + 1 < tp.pls.size() else tp.entries.size()

    cdef void _fix_group(self, TermPostC* tp, term_t t, size_t start, size_t end) noexcept nogil:
        """Recompute the suffix statistics MW(g_r), B(g_r) of one group [start, end)."""
        cdef size_t r = end
        cdef float mw = 0, b = 0, own
        cdef sid_t sid
        cdef int pos
        while r > start:
            r -= 1
            sid = tp.entries[r].sid_group & SID_MASK
            pos = self.table.term_pos(sid, t)
            own = round_up(suffix_max(&self.table.terms[self.table.hot[sid].term_off], pos, self.table.hot[sid].nterms))
            if own > mw:
                mw = own
            if tp.entries[r].own_b > b:
                b = tp.entries[r].own_b
            tp.entries[r].mw = mw
            tp.entries[r].b = b

    cdef void _fix_segment(self, TermPostC* tp, term_t t, size_t start, size_t end) noexcept nogil:
        cdef size_t gs = start, ge
        cdef uint32_t g
        while gs < end:
            g = tp.entries[gs].sid_group >> SID_BITS
            ge = gs + 1
            while ge < end and (tp.entries[ge].sid_group >> SID_BITS) == g:
                ge += 1
            self._fix_group(tp, t, gs, ge)
            gs = ge

    cdef void _insert_entry(self, term_t t, uint32_t leaf, sid_t sid) noexcept nogil:
        cdef TermPostC* tp
        cdef size_t i, j, pos, end, gs, ge
        cdef LeafPLC pl
        cdef PEntryC e
        cdef uint32_t g = <uint32_t>self._group_of(self.table.hot[sid].alpha)
        if t >= self.postings.size():
            self.postings.resize(t + 1)
        tp = &self.postings[t]
        i = self._pl_index(tp, leaf)
        if i == tp.pls.size() or tp.pls[i].leaf != leaf:
            pl.leaf = leaf
            pl.start = tp.pls[i].start if i < tp.pls.size() else <uint32_t>tp.entries.size()
            tp.pls.insert(tp.pls.begin() + i, pl)
        end = self._seg_end(tp, i)
        e.sid_group = sid | (g << SID_BITS)
        e.a = self._a_of(sid)
        e.mw = 0
        e.b = 0
        e.own_b = self._b_of(sid)
        self._own_text(sid, self.table.term_pos(sid, t), &e)
        pos = tp.pls[i].start
        while pos < end and ((tp.entries[pos].sid_group >> SID_BITS) < g or
                             ((tp.entries[pos].sid_group >> SID_BITS) == g and tp.entries[pos].a <= e.a)):
            pos += 1
        tp.entries.insert(tp.entries.begin() + pos, e)
        for j in range(i + 1, tp.pls.size()):
            tp.pls[j].start += 1
        gs = pos
        while gs > tp.pls[i].start and (tp.entries[gs - 1].sid_group >> SID_BITS) == g:
            gs -= 1
        ge = pos + 1
        end += 1
        while ge < end and (tp.entries[ge].sid_group >> SID_BITS) == g:
            ge += 1
        self._fix_group(tp, t, gs, ge)
        self.posting_count += 1

    cdef void _remove_entry(self, term_t t, uint32_t leaf, sid_t sid) noexcept nogil:
        cdef TermPostC* tp = &self.postings[t]
        cdef size_t i = self._pl_index(tp, leaf), j, pos, end, gs, ge
        cdef uint32_t g
        end = self._seg_end(tp, i)
        pos = tp.pls[i].start
        while (tp.entries[pos].sid_group & SID_MASK) != sid:
            pos += 1
        g = tp.entries[pos].sid_group >> SID_BITS
        tp.entries.erase(tp.entries.begin() + pos)
        end -= 1
        for j in range(i + 1, tp.pls.size()):
            tp.pls[j].start -= 1
        self.posting_count -= 1
        if end == tp.pls[i].start:
            tp.pls.erase(tp.pls.begin() + i)
            return
        gs = pos
        while gs > tp.pls[i].start and (tp.entries[gs - 1].sid_group >> SID_BITS) == g:
            gs -= 1
        ge = pos
        while ge < end and (tp.entries[ge].sid_group >> SID_BITS) == g:
            ge += 1
        if ge > gs:
            self._fix_group(tp, t, gs, ge)

    cdef void _insert_postings(self, sid_t sid) noexcept nogil:
        cdef uint32_t off = self.table.hot[sid].term_off, i
        for i in range(self.table.hot[sid].nterms):
            self._insert_entry(self.table.terms[off + i].term, self.table.hot[sid].leaf, sid)

    cdef void _split_postings(self, uint32_t old_leaf, uint32_t* child_leaf, vector[sid_t]& subs) noexcept nogil:
        """Replace the lists of old_leaf by the lists of its 4 children, term by term: the
        children's lists are sub-sequences of the old one, so they stay sorted; their group
        statistics are recomputed.  New leaf ids are the largest, so they go at the end."""
        cdef vector[term_t] terms
        cdef size_t i, j, s0, s1, pi, base
        cdef uint32_t off, q
        cdef term_t t
        cdef TermPostC* tp
        cdef vector[PEntryC] seg
        cdef LeafPLC pl
        cdef sid_t sid
        for i in range(subs.size()):
            off = self.table.hot[subs[i]].term_off
            for j in range(self.table.hot[subs[i]].nterms):
                terms.push_back(self.table.terms[off + j].term)
        std_sort(terms.begin(), terms.end())
        for i in range(terms.size()):
            if i > 0 and terms[i] == terms[i - 1]:
                continue
            t = terms[i]
            tp = &self.postings[t]
            pi = self._pl_index(tp, old_leaf)
            s0 = tp.pls[pi].start
            s1 = self._seg_end(tp, pi)
            seg.assign(tp.entries.begin() + s0, tp.entries.begin() + s1)
            tp.entries.erase(tp.entries.begin() + s0, tp.entries.begin() + s1)
            for j in range(pi + 1, tp.pls.size()):
                tp.pls[j].start -= <uint32_t>(s1 - s0)
            tp.pls.erase(tp.pls.begin() + pi)
            for q in range(4):
                base = tp.entries.size()
                for j in range(seg.size()):
                    sid = seg[j].sid_group & SID_MASK
                    if self.table.hot[sid].leaf == child_leaf[q]:
                        tp.entries.push_back(seg[j])
                if tp.entries.size() > base:
                    pl.leaf = child_leaf[q]
                    pl.start = <uint32_t>base
                    tp.pls.push_back(pl)
                    self._fix_segment(tp, t, base, tp.entries.size())

    cdef void _rebuild_postings(self) noexcept nogil:
        """Bulk build: every posting of every subscription in the tree, sorted once.  (The
        tree's leaves, not the table: a temporary index of bulk registration holds a subset.)"""
        cdef vector[BuildC] all_p
        cdef BuildC p
        cdef sid_t sid
        cdef uint32_t off, i, g
        cdef size_t r, leaf, q
        cdef TermPostC* tp
        cdef LeafPLC pl
        cdef PEntryC e
        for leaf in range(self.leaf_subs.size()):
            for q in range(self.leaf_subs[leaf].size()):
                sid = self.leaf_subs[leaf][q]
                g = <uint32_t>self._group_of(self.table.hot[sid].alpha)
                off = self.table.hot[sid].term_off
                for i in range(self.table.hot[sid].nterms):
                    p.term = self.table.terms[off + i].term
                    p.leaf = self.table.hot[sid].leaf
                    p.sid_group = sid | (g << SID_BITS)
                    p.a = self._a_of(sid)
                    p.pos = i
                    all_p.push_back(p)
        std_sort(all_p.begin(), all_p.end(), build_less)
        self.postings.clear()
        if all_p.size():
            self.postings.resize(all_p.back().term + 1)
        for r in range(all_p.size()):
            tp = &self.postings[all_p[r].term]
            if tp.pls.size() == 0 or tp.pls.back().leaf != all_p[r].leaf:
                pl.leaf = all_p[r].leaf
                pl.start = <uint32_t>tp.entries.size()
                tp.pls.push_back(pl)
            e.sid_group = all_p[r].sid_group
            e.a = all_p[r].a
            e.mw = 0
            e.b = 0
            e.own_b = self._b_of(all_p[r].sid_group & SID_MASK)
            self._own_text(all_p[r].sid_group & SID_MASK, all_p[r].pos, &e)
            tp.entries.push_back(e)
        self.posting_count = all_p.size()
        for r in range(self.postings.size()):
            tp = &self.postings[r]
            tp.entries.shrink_to_fit()
            tp.pls.shrink_to_fit()
            for i in range(tp.pls.size()):
                self._fix_segment(tp, <term_t>r, tp.pls[i].start, self._seg_end(tp, i))

    # ------------------------------------------------------------------ SubscriptionIndex API
    cdef void add(self, sid_t sid) noexcept nogil:
        self._ensure_scratch()
        self._tree_insert(sid, True)

    cdef void add_many(self, const sid_t* sids, size_t n) noexcept nogil:
        cdef size_t i
        cdef vector[double] alphas
        cdef int g
        if n < 64 or n * 4 < self.table.live - n:
            for i in range(n):
                self.add(sids[i])
            return
        if self.posting_count == 0 and n >= <size_t>(self.ngroups * 16):
            # alpha-group boundaries: quantiles of the subscriptions' alphas (spec §3.5)
            for i in range(n):
                alphas.push_back(self.table.hot[sids[i]].alpha)
            std_sort(alphas.begin(), alphas.end())
            self.group_bounds.clear()
            for g in range(1, self.ngroups):
                self.group_bounds.push_back(alphas[(n * g) // self.ngroups])
        self._ensure_scratch()
        for i in range(n):
            self._tree_insert(sids[i], False)
        self._rebuild_postings()

    cdef void remove(self, sid_t sid) noexcept nogil:
        cdef uint32_t off = self.table.hot[sid].term_off, i
        cdef uint32_t leaf = self.table.hot[sid].leaf
        cdef vector[sid_t]* subs = &self.leaf_subs[leaf]
        for i in range(self.table.hot[sid].nterms):
            self._remove_entry(self.table.terms[off + i].term, leaf, sid)
        for i in range(subs.size()):
            if subs[0][i] == sid:
                subs[0][i] = subs.back()
                subs.pop_back()
                break
        # theta_S(leaf) stays a lower bound (the minimum can only rise); refreshed lazily

    cdef void theta_changed(self, sid_t sid) noexcept nogil:
        """theta[sid] changed: lower the statistics at once, raise them lazily (spec §3.7)."""
        cdef double new = self.table.hot[sid].theta, old = self.table.theta_idx[sid]
        cdef uint32_t leaf = self.table.hot[sid].leaf, off, i
        cdef bint lowered = new < old
        if not lowered and not (new > old + self.theta_refresh or (old == 0.0 and new > 0.0)):
            return
        self.table.theta_idx[sid] = new
        if self.table.hot[sid].alpha < ALPHA_TEXT_LIMIT:
            off = self.table.hot[sid].term_off
            for i in range(self.table.hot[sid].nterms):
                self._remove_entry(self.table.terms[off + i].term, leaf, sid)
                self._insert_entry(self.table.terms[off + i].term, leaf, sid)
        if lowered:
            self._lower_theta_s(leaf, self._theta_s_of(sid))
        elif self.table.hot[sid].alpha > 0.0:
            self.leaf_raises[leaf] += 1
            if self.leaf_raises[leaf] * 16 >= self.leaf_subs[leaf].size() + 64:
                self._recompute_theta_s(leaf)

    cdef void _ensure_scratch(self) noexcept nogil:
        cdef CandStateC blank
        if self.cand.size() == 0:
            blank.sid = EMPTY_SLOT
            blank.last = 0
            self.cand_bits = 10
            self.cand.resize(1u << self.cand_bits, blank)

    # ------------------------------------------------------------------ candidate table
    # The subscriptions met by one message live in a small open-addressing table (linear
    # probing, Fibonacci hashing), cleared after each message: a few hundred entries that stay
    # in cache, where a dense per-subscription array costs a cache miss per visit.
    cdef inline CandStateC* _cand_find(self, sid_t sid) noexcept nogil:
        cdef uint32_t mask = (1u << self.cand_bits) - 1
        cdef uint32_t h = (sid * 2654435761u) >> (32 - self.cand_bits)
        while True:
            if self.cand[h].sid == sid:
                return &self.cand[h]
            if self.cand[h].sid == EMPTY_SLOT:
                return NULL
            h = (h + 1) & mask

    cdef CandStateC* _cand_insert(self, sid_t sid) noexcept nogil:
        cdef uint32_t mask, h, i
        cdef vector[CandStateC] old
        cdef CandStateC blank
        if 2 * (self.cand_slots.size() + 1) > (1u << self.cand_bits):
            old.swap(self.cand)
            self.cand_bits += 1
            blank.sid = EMPTY_SLOT
            blank.last = 0
            self.cand.resize(1u << self.cand_bits, blank)
            mask = (1u << self.cand_bits) - 1
            for i in range(self.cand_slots.size()):
                h = (old[self.cand_slots[i]].sid * 2654435761u) >> (32 - self.cand_bits)
                while self.cand[h].sid != EMPTY_SLOT:
                    h = (h + 1) & mask
                self.cand[h] = old[self.cand_slots[i]]
                self.cand_slots[i] = h
        mask = (1u << self.cand_bits) - 1
        h = (sid * 2654435761u) >> (32 - self.cand_bits)
        while self.cand[h].sid != EMPTY_SLOT:
            h = (h + 1) & mask
        self.cand[h].sid = sid
        self.cand[h].last = 0
        self.cand_slots.push_back(h)
        return &self.cand[h]

    cdef void _cand_clear(self) noexcept nogil:
        cdef size_t i
        for i in range(self.cand_slots.size()):
            self.cand[self.cand_slots[i]].sid = EMPTY_SLOT
        self.cand_slots.clear()

    # ------------------------------------------------------------------ dissemination
    cdef void _walk(self, double x, double y) noexcept nogil:
        """Top-down quadtree walk: prune a subtree when OSB(m, node) < theta_S(node) (Lemma 6
        aggregated: theta_S(node) is the minimum over the subtree, and OSB(m, node) >= OSB(m, c)
        for every leaf c below, so the test implies the leaf test for every subscription
        below).  Reached leaves are stamped with their OSB; unreached leaves count as pruned."""
        cdef int32_t n, leaf
        cdef double dout, osb
        cdef int q
        self.stack.clear()
        self.stack.push_back(0)
        while self.stack.size():
            n = self.stack.back()
            self.stack.pop_back()
            dout = mindist(&self.nodes[n].rect, x, y)
            osb = 1.0 - dout / self.max_dist
            if osb < self.nodes[n].theta_s:
                self.ctr.cells_pruned += 1
                continue
            if self.nodes[n].child >= 0:
                for q in range(4):
                    self.stack.push_back(self.nodes[n].child + q)
                continue
            leaf = self.nodes[n].leaf
            self.leaf_stamp[leaf] = self.stamp
            self.leaf_dout[leaf] = dout
            self.leaf_osb[leaf] = osb
            self.leaf_pruned[leaf] = 0
            self.ctr.cells_visited += 1

    cdef inline bint _leaf_open(self, uint32_t leaf, double x, double y) noexcept nogil:
        cdef int32_t n
        cdef double dout
        if self.leaf_stamp[leaf] == self.stamp:
            return not self.leaf_pruned[leaf]
        if self.walked:
            return False
        n = self.leaf_node[leaf]
        dout = mindist(&self.nodes[n].rect, x, y)
        self.leaf_stamp[leaf] = self.stamp
        self.leaf_dout[leaf] = dout
        self.leaf_osb[leaf] = 1.0 - dout / self.max_dist
        # Lemma 6 (cell pruning).  Safe: for s in the leaf, SSim(s, m) <= OSB(m, leaf), and
        # OSB < theta_S(leaf) <= theta_S(s) gives ST < alpha*theta_S(s) + (1 - alpha) <= theta - EPS.
        self.leaf_pruned[leaf] = self.rule_cell and self.leaf_osb[leaf] < self.nodes[n].theta_s
        if self.leaf_pruned[leaf]:
            self.ctr.cells_pruned += 1
        else:
            self.ctr.cells_visited += 1
        return not self.leaf_pruned[leaf]

    cdef inline bint _cut(self, const PEntryC* e, double wts_m, double osb) noexcept nogil:
        """The group-pruning predicate at a position r (Thm 5.3 at r = group start, Thm 5.4
        elsewhere): wtsum(m, j) * MW(g_r) < a_{s_r} - B(g_r) * OSB - EPS."""
        return wts_m * e.mw < e.a - e.b * osb - EPS

    cdef void _visit(self, sid_t sid, int j, term_t t, uint32_t leaf) noexcept nogil:
        """Decide a subscription at its first meeting with the message: the individual tests,
        then, for a survivor, the exact score from the two full term lists.  Its later meetings
        are skipped (Alg. 1 accumulates partial sums across lists and verifies at the end; the
        records are loaded here, so the exact score is cheaper, and no partial sum is ever
        reused, so CATCHUP is not needed).  Safety of deciding here: if an earlier common term
        sat in a list that a group rule skipped, that rule proved ST(s, m) < theta, and the
        verification below cannot admit s.  The caller has marked s DECIDED."""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef const SubTermC* st = &self.table.terms[h.term_off]
        cdef int i = 0
        cdef double ssim_up, acc, ub, ub2, dout
        self.ctr.entries_visited += 1
        while st[i].term != t:
            i += 1
        # Spatial bound (Defs 6-8).  Safe: if m is outside the leaf, the segment s->m leaves the
        # convex leaf rectangle at a border point b, so d(s, m) = d(s, b) + d(b, m) >= d_in(s) +
        # d_out(m, leaf); inside the leaf the bound is 1.
        ssim_up = 1.0
        if self.rule_exact_spatial:
            # The exact spatial similarity: the tightest bound, and the location is in the hot
            # record just loaded.
            ssim_up = spatial_sim(h.x, h.y, self.m_x, self.m_y, self.max_dist)
        elif self.rule_spatial:
            dout = self.leaf_dout[leaf]
            if dout > 0.0:
                ssim_up = 1.0 - (inner_dist(&self.nodes[self.leaf_node[leaf]].rect, h.x, h.y) + dout) / self.max_dist
        # Prefix filtering with max-weight refinement (Thm 5.1).  Safe at the first meeting:
        # every common term sits at s-position >= i and m-position >= j (one global order),
        # so TSim <= wtsum(s, i) * maxwt(m, j).
        if self.rule_prefix and combine(h.alpha, ssim_up, st[i].wtsum * self.m_maxwt[j]) < h.theta - EPS:
            self.ctr.prefix_pruned += 1
            return
        # Unseen-keywords bound (Thm 5.2) with the current term's exact contribution.  Safe: the
        # common terms after t sit at s-positions > i and m-positions > j, so TSim <=
        # w(s,i) w(m,j) + min(wtsum(s,i+1) * maxwt(m,j+1), maxwt(s,i+1) * wtsum(m,j+1)).
        if self.rule_unseen:
            acc = st[i].w * self.m_msg[j].w
            ub = 0.0
            if i + 1 < h.nterms and j + 1 < self.m_n:
                ub = st[i + 1].wtsum * self.m_maxwt[j + 1]
                ub2 = suffix_max(st, i + 1, h.nterms) * self.m_wtsum[j + 1]
                if ub2 < ub:
                    ub = ub2
            if combine(h.alpha, ssim_up, acc + ub) < h.theta - EPS:
                self.ctr.unseen_pruned += 1
                return
        self._verify(sid, self.m_x, self.m_y, self.m_msg, self.m_n)

    cdef inline void _member(self, const PEntryC* e, int j, term_t t, uint32_t leaf, double osb) noexcept nogil:
        """A posting entry that no group rule skipped."""
        cdef sid_t sid = e.sid_group & SID_MASK
        cdef CandStateC* c = self._cand_find(sid)
        if c == NULL:
            # The first-meeting test from the entry alone: Lemma 4 for one member, with the
            # alpha-partition's theta'_T = a_s - b_s * OSB (spec §3.5; IPT has no a_s, b_s).
            # Safe: at the first meeting every common term after t sits after position i in s
            # and after j in m, so TSim <= w(s,i) w(m,j) + wtsum(s,i+1) maxwt(m,j+1) (the current
            # term's exact contribution), SSim(s, m) <= OSB(m, leaf), and the stored a_s is a
            # lower and b_s an upper bound.  It spares the subscription's records for most
            # first meetings.
            if self.rule_entry and (e.own_w * self.m_msg[j].w + e.own_rest * self._m_maxwt_after(j)
                                    < e.a - e.own_b * osb - EPS):
                self._cand_insert(sid).last = DECIDED
                self.ctr.entry_pruned += 1
                self.ctr.entries_visited += 1
                return
        else:
            return                          # decided at an earlier meeting
        # Visited with the term's other survivors (_visit_pending).  Deferring within the term
        # changes nothing: a subscription has one entry per term, so no later entry of this
        # term meets it again, and the visits keep their order.
        self._cand_insert(sid).last = DECIDED
        self.pending.push_back(PendingC(sid, leaf))

    cdef void _visit_pending(self, int j, term_t t) noexcept nogil:
        """Visit the first meetings that term t's lists left for the individual tests, with
        the subscriptions' records fetched ahead: the hot record, then its term records (a
        survivor's records are cache misses, and these loads are independent)."""
        cdef size_t q, n = self.pending.size()
        for q in range(n):
            if q + 2 * PREFETCH_AHEAD < n:
                prefetch(&self.table.hot[self.pending[q + 2 * PREFETCH_AHEAD].sid])
            if q + PREFETCH_AHEAD < n:
                prefetch(&self.table.terms[self.table.hot[self.pending[q + PREFETCH_AHEAD].sid].term_off])
            self._visit(self.pending[q].sid, j, t, self.pending[q].leaf)
        self.pending.clear()

    cdef inline double _m_maxwt_after(self, int j) noexcept nogil:
        return self.m_maxwt[j + 1] if j + 1 < self.m_n else 0.0

    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        cdef int j
        cdef size_t p, r, r1, gend, lo, hi, mid, visits = 0
        cdef uint32_t leaf, g
        cdef size_t step
        cdef term_t t
        cdef TermPostC* tp
        cdef double s_sum = 0.0, s_max = 0.0, osb
        self.out.clear()
        self._cand_clear()
        self.ctr.messages += 1
        self.stamp += 1
        if self.stamp == <uint32_t>4294967295u:
            for p in range(self.leaf_stamp.size()):
                self.leaf_stamp[p] = 0
            self.stamp = 1
        self.m_x = x
        self.m_y = y
        self.m_n = n
        self.m_msg = m
        self.m_wtsum.resize(n)
        self.m_maxwt.resize(n)
        for j in range(n - 1, -1, -1):
            s_sum += m[j].w
            if m[j].w > s_max:
                s_max = m[j].w
            self.m_wtsum[j] = s_sum * (1.0 + 1e-15)
            self.m_maxwt[j] = s_max
        self.walked = False
        if self.rule_cell and self.cell_walk:
            if self.cell_walk == 2:
                for j in range(n):
                    if m[j].term < self.postings.size():
                        visits += self.postings[m[j].term].pls.size()
            if self.cell_walk == 1 or visits > self.nodes.size():
                self._walk(x, y)
                self.walked = True
        for j in range(n):
            t = m[j].term
            if t >= self.postings.size():
                continue
            tp = &self.postings[t]
            for p in range(tp.pls.size()):
                leaf = tp.pls[p].leaf
                if not self._leaf_open(leaf, x, y):
                    continue
                osb = self.leaf_osb[leaf]
                r = tp.pls[p].start
                r1 = self._seg_end(tp, p)
                if r1 - r <= SMALL_LIST and self.rule_entry:
                    # A short list: the group tests would cost as much as the members' own
                    # first-meeting tests below, which are at least as strong (own a_s, b_s).
                    while r < r1:
                        self._member(&tp.entries[r], j, t, leaf, osb)
                        r += 1
                    continue
                while r < r1:
                    g = tp.entries[r].sid_group >> SID_BITS
                    # the group's end, by exponential then binary search (groups are sorted)
                    step = 1
                    lo = r + 1
                    while lo < r1 and (tp.entries[lo].sid_group >> SID_BITS) == g:
                        lo = r + 1 + step
                        step *= 2
                    hi = lo if lo < r1 else r1
                    lo = r + 1 + step // 4 if step > 1 else r + 1
                    while lo < hi:
                        mid = (lo + hi) >> 1
                        if (tp.entries[mid].sid_group >> SID_BITS) == g:
                            lo = mid + 1
                        else:
                            hi = mid
                    gend = lo
                    # Group skipping (Thm 5.3).  Safe: for s in the group, theta_T(s, m) >=
                    # a_s - b_s*OSB >= a_g - b_g*OSB (OSB >= 0; stored a are lower, b upper
                    # bounds), and if t_j is s's first common term, TSim <= wtsum(m, j) *
                    # maxwt(s, pos_s(t_j)) <= wtsum(m, j) * MW_g (Lemma 4).
                    if self.rule_group:
                        self.ctr.groups_visited += 1
                        if self._cut(&tp.entries[r], self.m_wtsum[j], osb):
                            self.ctr.groups_skipped += 1
                            r = gend
                            continue
                    # Early termination (Thm 5.4).  Safe: members are sorted by a ascending and
                    # MW(g_r), B(g_r) are suffix maxima, so the predicate is monotone in r and
                    # holds member by member from the first r where it holds; binary search.
                    hi = gend
                    if self.rule_early:
                        lo = r
                        while lo < hi:
                            mid = (lo + hi) >> 1
                            if self._cut(&tp.entries[mid], self.m_wtsum[j], osb):
                                hi = mid
                            else:
                                lo = mid + 1
                        self.ctr.entries_cut += gend - hi
                    while r < hi:
                        self._member(&tp.entries[r], j, t, leaf, osb)
                        r += 1
                    r = gend
            self._visit_pending(j, t)

    cdef size_t memory(self) noexcept nogil:
        cdef size_t total = self.nodes.capacity() * sizeof(QNodeC) + self.postings.capacity() * sizeof(TermPostC)
        cdef size_t i
        for i in range(self.postings.size()):
            total += (self.postings[i].pls.capacity() * sizeof(LeafPLC)
                      + self.postings[i].entries.capacity() * sizeof(PEntryC))
        for i in range(self.leaf_subs.size()):
            total += 24 + self.leaf_subs[i].capacity() * sizeof(sid_t) + 4 + 4 + 8 + 8 + 1 + 4
        total += self.cand.capacity() * sizeof(CandStateC)
        return total

    # ------------------------------------------------------------------ Python access
    def leaves(self):
        """Number of live leaves."""
        cdef size_t i, n = 0
        for i in range(self.leaf_node.size()):
            if self.leaf_node[i] >= 0:
                n += 1
        return n

    def check_invariants(self):
        """Verify every structural invariant; raises AssertionError naming the first violation."""
        cdef size_t i, r, e0, e1
        cdef sid_t sid
        cdef uint32_t off, j, g, prev_g
        cdef int pos
        cdef TermPostC* tp
        cdef float mw, b
        count = {}
        for t in range(self.postings.size()):
            tp = &self.postings[t]
            for i in range(tp.pls.size()):
                if i > 0:
                    assert tp.pls[i - 1].leaf < tp.pls[i].leaf, f"term {t}: lists not sorted by leaf"
                e0 = tp.pls[i].start
                e1 = self._seg_end(tp, i)
                assert e1 > e0, f"term {t}: empty list for leaf {tp.pls[i].leaf}"
                assert self.leaf_node[tp.pls[i].leaf] >= 0, f"term {t}: list of a retired leaf"
                prev_g = 0
                for r in range(e0, e1):
                    sid = tp.entries[r].sid_group & SID_MASK
                    g = tp.entries[r].sid_group >> SID_BITS
                    assert self.table.hot[sid].alive, f"term {t}: dead subscription {sid}"
                    assert self.table.hot[sid].leaf == tp.pls[i].leaf, f"term {t}: sid {sid} in the wrong leaf"
                    assert g == <uint32_t>self._group_of(self.table.hot[sid].alpha), f"sid {sid}: wrong group"
                    assert g >= prev_g, f"term {t}: groups out of order"
                    if r > e0 and g == prev_g:
                        assert tp.entries[r - 1].a <= tp.entries[r].a, f"term {t}: a not ascending"
                    prev_g = g
                    assert tp.entries[r].a <= self._a_of(sid), f"sid {sid}: stored a above the true a"
                    pos = self.table.term_pos(sid, t)
                    assert pos >= 0, f"sid {sid} listed under term {t} it does not have"
                    mw = round_up(suffix_max(&self.table.terms[self.table.hot[sid].term_off], pos,
                                             self.table.hot[sid].nterms))
                    b = self._b_of(sid)
                    # suffix maxima: upper bounds of own values and of the next member's suffix
                    assert tp.entries[r].mw >= mw and tp.entries[r].b >= b, f"sid {sid}: suffix stats too low"
                    if r + 1 < e1 and (tp.entries[r + 1].sid_group >> SID_BITS) == g:
                        assert tp.entries[r].mw >= tp.entries[r + 1].mw and tp.entries[r].b >= tp.entries[r + 1].b
                    count[(t, sid)] = count.get((t, sid), 0) + 1
        for sid in range(self.table.ext_id.size()):
            if not self.table.hot[sid].alive:
                continue
            off = self.table.hot[sid].term_off
            for j in range(self.table.hot[sid].nterms):
                times = count.get((self.table.terms[off + j].term, sid), 0)
                assert times == 1, f"sid {sid}: term {self.table.terms[off + j].term} listed {times} times"
            assert self.table.theta_idx[sid] <= self.table.hot[sid].theta, f"sid {sid}: indexed theta above theta"
            leaf_n = self.leaf_node[self.table.hot[sid].leaf]
            assert leaf_n >= 0 and rect_contains(&self.nodes[leaf_n].rect, self.table.hot[sid].x, self.table.hot[sid].y)
            n = leaf_n
            while n >= 0:
                assert self.nodes[n].theta_s <= self._theta_s_of(sid), f"sid {sid}: theta_S not a lower bound"
                n = self.nodes[n].parent
        return True
