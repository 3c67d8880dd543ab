# cython: language_level=3
"""The cone-bounded index (``index="cone"``): dissemination over the cone trees (conetree.pyx
holds the layout and its upkeep; the rule and its proof are in docs/engine.md, "The cone of a
single-term posting").

First every message term's slot (one read of a dense array) and record, and every pair's slot
in the pair index, are prefetched; a term's lookup would otherwise cost several dependent misses.
Then, for each message term t with weight w_m, in ascending id:
* the flat list (alpha = 1, or more than three terms): each live entry is verified at its first
  common term with the message;
* the tree, level by level over wide nodes, the trees of all message terms together (a wide node
  holds both children's bounds, so a child is rejected from its parent's line; passing children
  and leaves' key lines of every term are prefetched before the next level): a child is skipped
  when no
  posting with rho >= rho_min and lam <= lam_max in its box can lie in the cone, i.e. when
  w_m - rho_min + NODE_SLACK (1 + |rho_min|) < 0 or MINDIST - pos_slack > D lam_max (that margin)
  (1 + NODE_SLACK) + NODE_SLACK D (pos_slack covers the f32 locations, NODE_SLACK the double
  arithmetic that made rho and lam); the postings of a passing leaf, then the tail's, take the same
  test on their key lines (x, y, rho and lam of four postings a line), four lanes at a time
  without a branch per posting;
* the records (sid, other terms, version) of the postings in the cone are prefetched as they pass
  and read once every leaf and tail is done: one whose subscription shares another term with m is
  left to the pair index; the others are verified if live (the version is read at the
  verification, prefetched with the subscription's record).
Then, per pair (t, u) of message terms, t < u: each live pair entry is verified unless its third
term is in m below u (it is verified at its first two common terms), or unless the pair bound
rules it out: the entry holds the score's fields (location and alpha to nearest f32, each
(1 - alpha) w(s, v) rounded up), so alpha (1 - max(0, d - pos_slack) / D) + sum of (1 - alpha)
w(s, v) w_m(v) over the entry's terms in m, plus PAIR_SLACK, bounds ST(s, m) from above; below
theta_idx[s] <= theta_s the subscription cannot qualify (proof: docs/cone-index.md, "The pair
bound").  The pair lists go in stages too: all lists found and their first lines prefetched, then
every entry's bound made with its theta_idx and generation prefetched, then compared.  Every qualifying
subscription is thus verified exactly once (one live posting per term, one pair entry per pair);
the survivors are verified together at the end, records prefetched ahead.
"""
from libc.math cimport INFINITY, sqrt, fabs
from libc.stdint cimport uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, MsgTermC, SubTermC, prefetch, now_ns
from skype._core.subindex cimport SubHotC
from skype._core.conetree cimport ConeLayout, ConePostC, ConeTermC, PairEntC, ConeWideC, ConeKeyLineC
from skype._core.predicate cimport term_index
from libcpp.vector cimport vector


cdef extern from *:
    """
    static inline int skype_ctz(unsigned v) { return __builtin_ctz(v); }
    """
    int ctz "skype_ctz"(uint32_t v) noexcept nogil

cdef double NODE_SLACK = 1e-9
cdef double PAIR_SLACK = 1e-6           # the pair bound's f32 alpha (|error| <= 2^-24 alpha, |S| <= 1), doubles
cdef size_t VERIFY_AHEAD = 8            # records prefetched ahead in the verification loop
cdef uint32_t NO_KIDS = 0xFFFFFFFF
cdef term_t NO_TERM = 0xFFFFFFFF
cdef uint32_t NO_SLOT = 0xFFFFFFFF
cdef uint64_t PAIR_HASH = 0x9E3779B97F4A7C15
cdef uint64_t LOW32 = 0xFFFFFFFF
cdef uint64_t NO_CHECK = 0x100000000     # pending_ver: liveness checked during the scan


cdef inline uint64_t span(const void* a, size_t nbytes) noexcept nogil:
    """Cache lines a record of nbytes at a touches."""
    cdef size_t lo = <size_t>a
    return ((lo + nbytes - 1) >> 6) - (lo >> 6) + 1


cdef inline double msg_weight(const MsgTermC* m, int n, term_t t) noexcept nogil:
    """w_m(t), or 0 if the message lacks t (weights are > 0)."""
    cdef int i = term_index(m, n, t)
    return m[i].w if i >= 0 else 0.0


cdef inline double pair_bound(const PairEntC* pe, double x, double y, double wt, double wu, double w3,
                              double max_dist, double pos_slack) noexcept nogil:
    """An upper bound of ST(s, m) for the subscription of a pair entry (docs/cone-index.md)."""
    cdef double dx = x - pe.x, dy = y - pe.y
    cdef double d = sqrt(dx * dx + dy * dy) - pos_slack
    if d < 0.0:
        d = 0.0
    return pe.alpha * (1.0 - d / max_dist) + pe.b_t * wt + pe.b_u * wu + pe.b_third * w3 + PAIR_SLACK


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


cdef inline uint32_t line_mask(const ConeKeyLineC* kl, double x, double y, double wm, double max_dist,
                               double pos_slack) noexcept nogil:
    """The lanes of a key line whose postings pass the cone test, computed without branches: the
    same arithmetic as may_hold for a point (|x - px| squared is (px - x) squared)."""
    cdef uint32_t mask = 0
    cdef int lane
    cdef double rho, lam, s, dx, dy, d, r
    for lane in range(4):
        rho = kl.rho[lane]
        lam = kl.lam[lane]
        s = wm - rho + NODE_SLACK * (1.0 + fabs(rho))
        dx = x - kl.x[lane]
        dy = y - kl.y[lane]
        d = sqrt(dx * dx + dy * dy) - pos_slack
        r = max_dist * lam * s * (1.0 + NODE_SLACK) + NODE_SLACK * max_dist
        mask |= (<uint32_t>(not (s < 0.0)) & (<uint32_t>(lam == INFINITY) | <uint32_t>(d <= r))) << lane
    return mask


cdef class ConeIndex(ConeLayout):
    def __cinit__(self, *args, **kwargs):
        self.nodes_tested = self.tree_read = self.tail_read = self.flat_read = self.pair_entries_read = 0
        self.pair_pruned = 0
        self.node_lines = self.key_lines = self.meta_lines = self.pair_lines = 0
        self.pair_bound_on = True
        self.timed = False
        self.scan_ns = self.verify_ns = 0

    cdef bint _first_common(self, sid_t sid, uint32_t t, const MsgTermC* m, int n) noexcept nogil:
        """Is t the first term the subscription shares with m?"""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef const SubTermC* st = &self.table.terms[h.term_off]
        cdef int i = 0, j = 0
        while i < h.nterms and j < n:
            if st[i].term == m[j].term:
                return st[i].term == t
            elif st[i].term < m[j].term:
                i += 1
            else:
                j += 1
        return False

    cdef void _lanes(self, ConeTermC* ct, int q, uint32_t lo, uint32_t hi, double x, double y,
                     double wm) noexcept nogil:
        """Postings [lo, hi) of message term q tested a key line at a time (line_mask, no branch
        per posting); a passing posting's record is prefetched and read after every leaf and tail
        (``_survivor``)."""
        cdef uint32_t ln, mask, i
        for ln in range(lo >> 2, ((hi - 1) >> 2) + 1):
            mask = line_mask(&ct.keys[ln], x, y, wm, self.max_dist, self.pos_slack)
            if ln == (lo >> 2):
                mask &= <uint32_t>(0xF << (lo & 3)) & 0xF
            if ln == ((hi - 1) >> 2):
                mask &= <uint32_t>(0xF >> (3 - ((hi - 1) & 3)))
            while mask:
                i = (ln << 2) | <uint32_t>ctz(mask)
                mask &= mask - 1
                prefetch(&ct.posts[i])
                self.survivors.push_back((<uint64_t>q << 32) | i)

    cdef inline void _survivor(self, const ConePostC* p, const MsgTermC* m, int n) noexcept nogil:
        """A posting that passed its cone test: left to the pair index if its subscription shares
        another term with m, else pending (liveness checked at the verification, the version
        prefetched there)."""
        cdef int j
        self.meta_lines += 1
        if p.other0 != NO_TERM:
            for j in range(n):
                if m[j].term == p.other0 or m[j].term == p.other1:
                    return                              # the pair index decides it
        self.pending.push_back(p.sid)
        self.pending_ver.push_back(p.ver)

    cdef uint64_t _trees(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        """The flat lists, then the trees of all message terms walked level by level together
        (every passing child and leaf of every term prefetched before the next level is read:
        more misses in flight than one tree at a time), then the leaves' and tails' postings, then
        the records of those in the cone.  Returns the entries read."""
        cdef int q, k
        cdef size_t li, e, s0
        cdef uint32_t lo, hi, ln
        cdef ConeTermC* ct
        cdef const ConeWideC* w
        cdef uint64_t item, read = 0
        cdef double wm
        self.level.clear()
        for q in range(n):
            if self.mslots[q] == NO_SLOT:
                continue
            ct = &self.terms[self.mslots[q]]
            for e in range(ct.flat.size()):            # alpha = 1 or many terms: each at its first common term
                if self.gen[ct.flat[e].sid] == ct.flat[e].gen and self._first_common(ct.flat[e].sid, m[q].term, m, n):
                    self.pending.push_back(ct.flat[e].sid)
                    self.pending_ver.push_back(NO_CHECK)
            self.flat_read += ct.flat.size()
            read += ct.flat.size()
            if ct.tree_n:
                prefetch(&ct.wide[0])
                self.level.push_back(<uint64_t>q << 32)
        self.leaves.clear()
        while self.level.size():                       # items: q << 32 | wide node of term q
            self.following.clear()
            for li in range(self.level.size()):
                item = self.level[li]
                q = <int>(item >> 32)
                ct = &self.terms[self.mslots[q]]
                wm = m[q].w
                w = &ct.wide[item & LOW32]
                self.node_lines += span(w, sizeof(ConeWideC))
                for k in range(2):
                    self.nodes_tested += 1
                    if not may_hold(w.minx[k], w.miny[k], w.maxx[k], w.maxy[k], w.rho_min[k], w.lam_max[k],
                                    x, y, wm, self.max_dist, self.pos_slack):
                        continue
                    if w.cnt[k] == 0:
                        prefetch(&ct.wide[w.ref[k]])
                        self.following.push_back((<uint64_t>q << 32) | w.ref[k])
                    else:
                        for ln in range(w.ref[k] >> 2, ((w.ref[k] + w.cnt[k] - 1) >> 2) + 1):
                            prefetch(&ct.keys[ln])
                        self.leaves.push_back(<uint32_t>q)
                        self.leaves.push_back(w.ref[k])
                        self.leaves.push_back(w.ref[k] + w.cnt[k])
            self.level.swap(self.following)
        self.survivors.clear()                         # items: q << 32 | posting of term q in the cone
        for li in range(0, self.leaves.size(), 3):
            q = <int>self.leaves[li]
            lo = self.leaves[li + 1]
            hi = self.leaves[li + 2]
            ct = &self.terms[self.mslots[q]]
            self.tree_read += hi - lo
            read += hi - lo
            self.key_lines += span(&ct.keys[lo >> 2], (((hi - 1) >> 2) - (lo >> 2) + 1) * 64)
            self._lanes(ct, q, lo, hi, x, y, m[q].w)
        for q in range(n):                             # the tails
            if self.mslots[q] == NO_SLOT:
                continue
            ct = &self.terms[self.mslots[q]]
            if ct.posts.size() > ct.tree_n:
                self.key_lines += span(&ct.keys[ct.tree_n >> 2],
                                       (((ct.posts.size() - 1) >> 2) - (ct.tree_n >> 2) + 1) * 64)
                self._lanes(ct, q, ct.tree_n, <uint32_t>ct.posts.size(), x, y, m[q].w)
            self.tail_read += ct.posts.size() - ct.tree_n
            read += ct.posts.size() - ct.tree_n
        for s0 in range(self.survivors.size()):        # the records in the cone, prefetched as they passed
            item = self.survivors[s0]
            self._survivor(&self.terms[self.mslots[<int>(item >> 32)]].posts[item & LOW32], m, n)
        return read

    cdef void _scan(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        cdef int q, r
        cdef vector[PairEntC]* lst
        cdef const PairEntC* pe
        cdef size_t li, e
        cdef double w3
        cdef uint64_t read = 0
        cdef const double* theta_idx = self.table.theta_idx.data()
        cdef PairCandC pc
        cdef uint32_t slot
        cdef uint64_t key
        self.mslots.clear()                            # every term's record and pair slot prefetched first
        for q in range(n):
            slot = self._find_slot(m[q].term)
            self.mslots.push_back(slot)
            if slot != NO_SLOT:
                prefetch(&self.terms[slot])
                prefetch(<const char*>&self.terms[slot] + 64)
        for q in range(n):
            for r in range(q + 1, n):
                key = (<uint64_t>m[q].term << 32) | m[r].term
                prefetch(&self.pslots[(key * PAIR_HASH) >> self.pshift])
        read += self._trees(m, n, x, y)
        self.plists_found.clear()                      # subscriptions sharing two or more terms, in stages:
        self.plist_r.clear()                           # every pair's list found and its first lines prefetched,
        for q in range(n):
            for r in range(q + 1, n):
                lst = self._pair_find((<uint64_t>m[q].term << 32) | m[r].term)
                if lst == NULL or lst.size() == 0:
                    continue
                prefetch(lst.data())
                prefetch(<const char*>lst.data() + 64)
                self.plists_found.push_back(lst)
                self.plist_r.push_back((<uint64_t>q << 32) | <uint64_t>r)
        self.pair_cands.clear()                        # then each entry's bound made and its theta_idx and
        for li in range(self.plists_found.size()):     # generation prefetched, then compared
            lst = self.plists_found[li]
            q = <int>(self.plist_r[li] >> 32)
            r = <int>(self.plist_r[li] & LOW32)
            self.pair_entries_read += lst.size()
            self.pair_lines += span(lst.data(), lst.size() * sizeof(PairEntC))
            read += lst.size()
            for e in range(lst.size()):
                pe = &lst[0][e]
                w3 = 0.0
                if pe.third != NO_TERM:
                    w3 = msg_weight(m, n, pe.third)
                    if w3 > 0.0 and pe.third < m[r].term:
                        continue                        # verified at its first two common terms
                pc.sid = pe.sid
                pc.gen = pe.gen
                pc.bound = (pair_bound(pe, x, y, m[q].w, m[r].w, w3, self.max_dist, self.pos_slack)
                            if self.pair_bound_on else INFINITY)
                prefetch(&theta_idx[pe.sid])
                prefetch(&self.gen[pe.sid])
                self.pair_cands.push_back(pc)
        for li in range(self.pair_cands.size()):
            if self.pair_cands[li].bound < theta_idx[self.pair_cands[li].sid]:
                self.pair_pruned += 1
                continue
            if self.gen[self.pair_cands[li].sid] == self.pair_cands[li].gen:
                self.pending.push_back(self.pair_cands[li].sid)
                self.pending_ver.push_back(NO_CHECK)
        self.ctr.entries_visited += read

    cdef void _verify_pending(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        """The survivors verified in a row, records prefetched VERIFY_AHEAD ahead."""
        cdef const SubHotC* hot = self.table.hot.data()
        cdef size_t i, c = self.pending.size()
        cdef const sid_t* sids = self.pending.data()
        cdef const uint64_t* pv = self.pending_ver.data()
        cdef const uint32_t* ver = self.ver.data()
        for i in range(c):
            if i + VERIFY_AHEAD < c:
                prefetch(&hot[sids[i + VERIFY_AHEAD]])
                if pv[i + VERIFY_AHEAD] != NO_CHECK:
                    prefetch(&ver[sids[i + VERIFY_AHEAD]])
            if i + VERIFY_AHEAD // 2 < c:
                prefetch(&self.table.terms[hot[sids[i + VERIFY_AHEAD // 2]].term_off])
            if pv[i] != NO_CHECK:
                self.meta_lines += 1
                if ver[sids[i]] != pv[i]:
                    continue                            # dead: re-posted or removed
            self._verify(sids[i], x, y, m, n)

    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        cdef double t0 = 0, t1 = 0
        self.out.clear()
        self.pending.clear()
        self.pending_ver.clear()
        self.ctr.messages += 1
        if self.timed:
            t0 = now_ns()
        self._scan(m, n, x, y)
        if self.timed:
            t1 = now_ns()
            self.scan_ns += t1 - t0
        self._verify_pending(m, n, x, y)
        if self.timed:
            self.verify_ns += now_ns() - t1

    def set_timers(self, bint on):
        self.timed = on

    def set_pair_bound(self, bint on):
        """The pair bound on (the default) or off: a hook for the paired bench and the tests
        (the results are the same either way; off, every live pair entry is verified)."""
        self.pair_bound_on = on

    def phase_seconds(self):
        """The dissemination split: the scan (flat lists, trees, tails, pair entries) and the
        verification (timed only)."""
        return {"scan": self.scan_ns / 1e9, "verify": self.verify_ns / 1e9} if self.timed else {}

    def counters(self):
        c = super().counters()
        c.update(nodes_tested=self.nodes_tested, tree_postings=self.tree_read, tail_postings=self.tail_read,
                 flat_entries=self.flat_read, pair_entries=self.pair_entries_read, pair_pruned=self.pair_pruned,
                 node_lines=self.node_lines, key_lines=self.key_lines, meta_lines=self.meta_lines,
                 pair_lines=self.pair_lines)
        return c

    def reset_counters(self):
        super().reset_counters()
        self.nodes_tested = self.tree_read = self.tail_read = self.flat_read = self.pair_entries_read = 0
        self.pair_pruned = 0
        self.node_lines = self.key_lines = self.meta_lines = self.pair_lines = 0

    @property
    def cone_counts(self):
        """(tree postings, tail postings, flat entries, pair entries, nodes tested) so far."""
        return (self.tree_read, self.tail_read, self.flat_read, self.pair_entries_read, self.nodes_tested)
