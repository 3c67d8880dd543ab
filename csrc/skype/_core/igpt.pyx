# cython: language_level=3
"""IGPT, the paper's subscription index (spec §3), and IPT (IGPT without group pruning): their
dissemination.  The quadtree, the posting lists, their statistics and invariants are
``igptlayout.IGPTLayout``; the subscription table and the verification every index shares are
in subindex.pyx.

Dissemination (Algorithm 1, term-major).  For each term t_j of the message (rarest first), for
each leaf with a list for t_j: cell pruning, then per group: group skipping and early
termination; then per member not yet met by this message: a first-meeting test from the
posting entry alone, and for survivors the individual tests (prefix filtering, the
unseen-keywords bound, with the exact or the Def. 8 spatial bound) and the exact score from the
two full term lists.  Each subscription is decided at its first meeting (see ``_visit``).  A
rule only skips on an upper bound strictly below the threshold by EPS = 1e-9; the safety
argument of each rule is next to its code.
"""
from libc.stdint cimport int32_t, uint32_t
from skype._core.types cimport term_t, sid_t, SubTermC, MsgTermC, prefetch, PREFETCH_AHEAD
from skype._core.subindex cimport SubHotC, SID_BITS
from skype._core.scoring cimport mindist, inner_dist, combine, spatial_sim
from skype._core.igptlayout cimport EPS, SID_MASK, suffix_max, TermPostC

cdef enum:
    DECIDED = -2           # candidate state: the subscription was decided at its first meeting
    SMALL_LIST = 4         # lists this short are scanned without the group rules
cdef uint32_t EMPTY_SLOT = 0xFFFFFFFFu


cdef class IGPTIndex(IGPTLayout):
    cdef void _ensure_scratch(self) noexcept nogil:
        """The per-message scratch: one slot per leaf (leaves only grow), the candidate table."""
        cdef CandStateC blank
        cdef size_t nleaves = self.leaf_node.size()
        if self.leaf_stamp.size() < nleaves:
            self.leaf_stamp.resize(nleaves, 0)
            self.leaf_osb.resize(nleaves, 0)
            self.leaf_dout.resize(nleaves, 0)
            self.leaf_pruned.resize(nleaves, 0)
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
        self._ensure_scratch()
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
        return (IGPTLayout.memory(self) + self.cand.capacity() * sizeof(CandStateC)
                + self.leaf_stamp.capacity() * (4 + 8 + 8 + 1))
