# cython: language_level=3
"""The quadtree and posting lists of IGPT and IPT, and their upkeep (``igpt.IGPTIndex``
disseminates over them).

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
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, uint32_t
from libc.string cimport memset
from skype._core.types cimport term_t, sid_t, RectC, SubTermC
from skype._core.subindex cimport SubscriptionIndex, SubTable, SubHotC, CountersC, SID_BITS
from skype._core.scoring cimport rect_contains, quadrant, child_rect, round_up, round_down

cdef double ALPHA_TEXT_LIMIT = 1.0 - 1e-6


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


cdef class IGPTLayout(SubscriptionIndex):
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

    cdef size_t memory(self) noexcept nogil:
        cdef size_t total = self.nodes.capacity() * sizeof(QNodeC) + self.postings.capacity() * sizeof(TermPostC)
        cdef size_t i
        for i in range(self.postings.size()):
            total += (self.postings[i].pls.capacity() * sizeof(LeafPLC)
                      + self.postings[i].entries.capacity() * sizeof(PEntryC))
        for i in range(self.leaf_subs.size()):
            total += 24 + self.leaf_subs[i].capacity() * sizeof(sid_t) + 4
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
