# cython: language_level=3
"""The cone trees' layout and upkeep (``index="cone"``; dissemination in coneindex.pyx).

The cone (docs/engine.md, "The cone of a single-term posting"): a subscription s sharing exactly
one term t with the message m, 0 < alpha < 1, qualifies iff d(s, m) <= D * lam * (w_m - rho), with
rho = ((theta - alpha) / (1 - alpha)) / w and lam = w (1 - alpha) / alpha (lam = +inf at alpha = 0).
rho grows with theta, so a posting whose rho was made from any theta' <= theta_s is an upper
bound: it keeps every message that reaches theta_s.

Layout.  Per term, the postings of subscriptions with at most MAX_PAIR_TERMS terms and alpha < 1
form a k-d tree over their first ``tree_n`` postings (split on the widest of x, y and
RHO_SCALE * rho, rho clipped to [-1, 2] for the split only; halves rounded to whole leaves),
followed by a tail of postings appended since, tested one by one.  A posting is split in two
arrays: its record (sid, other terms, version; 16 bytes) and its cone fields in key lines of four
postings (x, y, rho, lam as arrays, one 64-byte line), f32 copies: location to nearest, rho
rounded down, lam rounded up.  The tree is stored as wide nodes (64 bytes, one line, in DFS
order): each holds its two children's box, rho_min and lam_max over those copies, and per child
either the wide node below or the leaf's range of postings; the root's children are in wide node
0 (a tree of one leaf has one child and an empty one, whose rho_min = +inf rejects every message).
A rebuild builds the binary tree over scratch copies and stores it so.  Subscriptions sharing
two or more terms with m are found by the pair index ((t, u) -> entries, t < u; open addressing).
Postings of alpha = 1 and of subscriptions with more than MAX_PAIR_TERMS terms sit in a flat
per-term list, read whole.

Upkeep (invariants, checked by ``check_invariants``):
* every subscription in the index has, per term, exactly one live posting (or flat entry), made
  from theta_idx[s] <= theta_s; a posting is live iff its ``ver`` equals ``ver[s]``, a flat or pair
  entry iff its ``gen`` equals ``gen[s]``; dead entries are skipped when met and dropped by rebuilds;
* add: postings appended to the terms' tails, pair entries inserted; remove: ``ver`` and ``gen``
  move on (every entry of s dies at once; the slot may be reused);
* theta decrease: ``ver`` moves on and the postings are appended again with the new rho (at once:
  the old rho would miss messages); a raise is lazy (the old rho is still an upper bound) until it
  passes theta_idx + theta_refresh, then it is posted the same way;
* a term's tree is rebuilt over its live postings once its tail and dead entries pass
  ``tail_fraction`` of its postings (and ``tail_min``); the pair index is compacted once half dead.
"""
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libcpp.algorithm cimport sort as std_sort
from libcpp.utility cimport pair
from libc.math cimport INFINITY, fabs
from libc.stdint cimport uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, SubTermC
from skype._core.scoring cimport round_up, round_down
from skype._core.subindex cimport SubTable, SubHotC, SubscriptionIndex

cdef extern from *:
    """
    #include <utility>
    #include <unordered_map>
    #include <cstdint>
    static inline uint32_t skype_cone_second(std::unordered_map<uint32_t, uint32_t>::iterator it) { return it->second; }
    """
    uint32_t pair_second "skype_cone_second"(unordered_map[term_t, uint32_t].iterator it) noexcept nogil

cdef uint32_t NO_KIDS = 0xFFFFFFFF
cdef uint32_t NO_SLOT = 0xFFFFFFFF
cdef term_t DENSE_TERMS = 1 << 22     # terms below it have a dense slot (16 MB at most)
cdef uint64_t PAIR_HASH = 0x9E3779B97F4A7C15


cdef inline double split_key(const ConeFullC* p, int dim, double rho_scale) noexcept nogil:
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


cdef inline void put_key(ConeTermC* ct, size_t i, float x, float y, float rho, float lam) noexcept nogil:
    """Posting i's cone fields into its key line (a line appended when i starts one)."""
    cdef ConeKeyLineC line
    if i >> 2 >= ct.keys.size():
        ct.keys.push_back(line)
    ct.keys[i >> 2].x[i & 3] = x
    ct.keys[i >> 2].y[i & 3] = y
    ct.keys[i >> 2].rho[i & 3] = rho
    ct.keys[i >> 2].lam[i & 3] = lam


cdef class ConeLayout(SubscriptionIndex):
    def __cinit__(self, SubTable table, double max_dist, int leaf=8, double rho_scale=100.0,
                  double theta_refresh=0.02, double tail_fraction=0.25, int tail_min=64, *args, **kwargs):
        self.table = table
        self.max_dist = max_dist
        self.leaf = leaf if leaf >= 1 else 1
        self.rho_scale = rho_scale
        self.theta_refresh = theta_refresh
        self.tail_fraction = tail_fraction
        self.tail_min = <uint32_t>(tail_min if tail_min >= 0 else 0)
        self.reach = 0.0
        self.pos_slack = 0.0
        self.rebuilds = self.reposts = self.rebuilt_postings = 0
        self.pair_lists = self.pair_live = self.pair_dead = 0
        self._pair_rehash(16)

    # ------------------------------------------------------------------ terms and subscriptions
    cdef uint32_t _slot(self, term_t t) noexcept nogil:
        cdef unordered_map[term_t, uint32_t].iterator it = self.term_slot.find(t)
        cdef ConeTermC fresh
        if it != self.term_slot.end():
            return pair_second(it)
        fresh.tree_n = 0
        fresh.dead = 0
        if t < DENSE_TERMS:
            if self.dense_slot.size() <= t:
                self.dense_slot.resize(t + 1, NO_SLOT)
            self.dense_slot[t] = <uint32_t>self.terms.size()
        self.term_slot[t] = <uint32_t>self.terms.size()
        self.terms.push_back(fresh)
        self.touched_mark.push_back(0)
        return <uint32_t>(self.terms.size() - 1)

    cdef uint32_t _find_slot(self, term_t t) noexcept nogil:
        """The term's slot, or NO_SLOT (the dense array below DENSE_TERMS, else the map)."""
        cdef unordered_map[term_t, uint32_t].iterator it
        if t < DENSE_TERMS:
            return self.dense_slot[t] if t < self.dense_slot.size() else NO_SLOT
        it = self.term_slot.find(t)
        return pair_second(it) if it != self.term_slot.end() else NO_SLOT

    cdef void _grow(self, sid_t sid) noexcept nogil:
        if self.ver.size() <= sid:
            self.ver.resize(sid + 1, 0)
            self.gen.resize(sid + 1, 0)
            self.present.resize(sid + 1, 0)

    cdef inline bint _in_tree(self, sid_t sid) noexcept nogil:
        """Are the subscription's terms tree postings (not flat entries)?"""
        cdef const SubHotC* h = &self.table.hot[sid]
        return h.alpha < 1.0 and h.nterms <= MAX_PAIR_TERMS

    cdef void _post(self, sid_t sid, bint pairs) noexcept nogil:
        """Append the subscription's postings (or flat entries) with its current version and
        theta_idx; with ``pairs``, its pair entries too."""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef const SubTermC* st = &self.table.terms[h.term_off]
        cdef double theta = self.table.theta_idx[sid]
        cdef bint tree = self._in_tree(sid)
        cdef int i, j
        cdef uint32_t slot
        cdef ConePostC p
        cdef FlatC f
        cdef PairEntC pe
        for i in range(h.nterms):
            slot = self._slot(st[i].term)
            if not tree:
                if not pairs:
                    continue
                f.sid = sid
                f.gen = self.gen[sid]
                self.terms[slot].flat.push_back(f)
            else:
                p.sid = sid
                p.ver = self.ver[sid]
                p.other0 = NO_TERM
                p.other1 = NO_TERM
                for j in range(h.nterms):
                    if j != i:
                        if p.other0 == NO_TERM:
                            p.other0 = st[j].term
                        else:
                            p.other1 = st[j].term
                self.terms[slot].posts.push_back(p)
                put_key(&self.terms[slot], self.terms[slot].posts.size() - 1, <float>h.x, <float>h.y,
                        round_down(((theta - h.alpha) / (1.0 - h.alpha)) / st[i].w),
                        round_up(st[i].w * (1.0 - h.alpha) / h.alpha) if h.alpha > 0.0 else INFINITY)
            if not self.touched_mark[slot]:
                self.touched_mark[slot] = 1
                self.touched.push_back(slot)
        if fabs(h.x) > self.reach or fabs(h.y) > self.reach:
            self.reach = max(fabs(h.x), fabs(h.y))
            self.pos_slack = self.reach / 8388608.0
        if pairs and tree:
            pe.sid = sid
            pe.x = <float>h.x
            pe.y = <float>h.y
            pe.alpha = <float>h.alpha
            for i in range(h.nterms):
                for j in range(i + 1, h.nterms):
                    pe.gen = self.gen[sid]
                    pe.b_t = round_up((1.0 - h.alpha) * st[i].w)
                    pe.b_u = round_up((1.0 - h.alpha) * st[j].w)
                    pe.third = NO_TERM
                    pe.b_third = 0.0
                    if h.nterms == 3:
                        pe.third = st[3 - i - j].term
                        pe.b_third = round_up((1.0 - h.alpha) * st[3 - i - j].w)
                    self._pair_insert((<uint64_t>st[i].term << 32) | st[j].term, pe)

    cdef void _kill(self, sid_t sid, bint pairs) noexcept nogil:
        """Every posting of the subscription dies (``pairs``: its flat and pair entries too)."""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef const SubTermC* st = &self.table.terms[h.term_off]
        cdef bint tree = self._in_tree(sid)
        cdef uint32_t slot
        cdef int i
        if not tree and not pairs:
            return
        for i in range(h.nterms):
            slot = self._slot(st[i].term)
            self.terms[slot].dead += 1
            if not self.touched_mark[slot]:
                self.touched_mark[slot] = 1
                self.touched.push_back(slot)
        self.ver[sid] += 1
        if pairs:
            self.gen[sid] += 1
            if tree:
                self.pair_live -= <uint64_t>(h.nterms * (h.nterms - 1) // 2)
                self.pair_dead += <uint64_t>(h.nterms * (h.nterms - 1) // 2)

    cdef void _check_touched(self) noexcept nogil:
        """Rebuild the touched terms whose tails and dead entries passed the fraction."""
        cdef size_t i
        cdef uint32_t slot, stale, size
        cdef ConeTermC* ct
        for i in range(self.touched.size()):
            slot = self.touched[i]
            self.touched_mark[slot] = 0
            ct = &self.terms[slot]
            size = <uint32_t>(ct.posts.size() + ct.flat.size())
            stale = <uint32_t>(ct.posts.size() - ct.tree_n) + ct.dead
            if stale >= self.tail_min and stale > self.tail_fraction * size:
                self._rebuild_term(slot)
        self.touched.clear()
        if self.pair_dead > 1024 and self.pair_dead > self.pair_live:
            self._pair_compact()

    cdef void add(self, sid_t sid) noexcept nogil:
        self.add_many(&sid, 1)

    cdef void add_many(self, const sid_t* sids, size_t n) noexcept nogil:
        cdef size_t i
        cdef sid_t sid
        for i in range(n):
            sid = sids[i]
            self._grow(sid)
            self.ver[sid] += 1
            self.gen[sid] += 1
            self.present[sid] = 1
            self.table.theta_idx[sid] = self.table.hot[sid].theta
            if self._in_tree(sid):
                self.pair_live += <uint64_t>(self.table.hot[sid].nterms * (self.table.hot[sid].nterms - 1) // 2)
            self._post(sid, True)
        self._check_touched()

    cdef void remove(self, sid_t sid) noexcept nogil:
        if sid >= self.present.size() or not self.present[sid]:
            return
        self._kill(sid, True)
        self.present[sid] = 0
        self._check_touched()

    cdef double replay_raise_at(self, double theta_idx) noexcept nogil:
        """A bulk replay tells of a raise past theta_idx + theta_refresh (a raise re-posts)."""
        return theta_idx + self.theta_refresh

    cdef void theta_changed(self, sid_t sid) noexcept nogil:
        """theta[sid] changed: a decrease re-posts at once, a raise past theta_refresh too."""
        cdef double new = self.table.hot[sid].theta, old = self.table.theta_idx[sid]
        if sid >= self.present.size() or not self.present[sid] or not self._in_tree(sid):
            self.table.theta_idx[sid] = new
            return
        if not new < old and not (new > old + self.theta_refresh or (old == 0.0 and new > 0.0)):
            return
        self._kill(sid, False)
        self.table.theta_idx[sid] = new
        self._post(sid, False)
        self.reposts += 1
        self._check_touched()

    # ------------------------------------------------------------------ the pair index
    cdef void _pair_rehash(self, size_t cap) noexcept nogil:
        cdef vector[PairSlotC] old
        cdef size_t k
        cdef uint64_t slot
        old.swap(self.pslots)
        self.pmask = cap - 1
        self.pshift = 64
        k = cap
        while k > 1:
            k >>= 1
            self.pshift -= 1
        self.pslots.resize(cap)
        for k in range(cap):
            self.pslots[k].key = PAIR_EMPTY
        for k in range(old.size()):
            if old[k].key == PAIR_EMPTY:
                continue
            slot = (old[k].key * PAIR_HASH) >> self.pshift
            while self.pslots[slot].key != PAIR_EMPTY:
                slot = (slot + 1) & self.pmask
            self.pslots[slot] = old[k]

    cdef vector[PairEntC]* _pair_find(self, uint64_t key) noexcept nogil:
        cdef uint64_t slot = (key * PAIR_HASH) >> self.pshift
        while self.pslots[slot].key != key:
            if self.pslots[slot].key == PAIR_EMPTY:
                return NULL
            slot = (slot + 1) & self.pmask
        return &self.plists[self.pslots[slot].list]

    cdef void _pair_insert(self, uint64_t key, PairEntC e) noexcept nogil:
        cdef uint64_t slot
        cdef vector[PairEntC]* lst = self._pair_find(key)
        cdef vector[PairEntC] fresh
        if lst != NULL:
            lst.push_back(e)
            return
        if 2 * (self.pair_lists + 1) > self.pslots.size():
            self._pair_rehash(2 * self.pslots.size())
        slot = (key * PAIR_HASH) >> self.pshift
        while self.pslots[slot].key != PAIR_EMPTY:
            slot = (slot + 1) & self.pmask
        self.pslots[slot].key = key
        self.pslots[slot].list = <uint32_t>self.plists.size()
        self.plists.push_back(fresh)
        self.plists.back().push_back(e)
        self.pair_lists += 1

    cdef void _pair_compact(self) noexcept nogil:
        """Drop the dead pair entries (lists left empty keep their slot)."""
        cdef size_t k, i, kept
        cdef vector[PairEntC]* lst
        for k in range(self.plists.size()):
            lst = &self.plists[k]
            kept = 0
            for i in range(lst.size()):
                if self.gen[lst[0][i].sid] == lst[0][i].gen:
                    lst[0][kept] = lst[0][i]
                    kept += 1
            lst.resize(kept)
            lst.shrink_to_fit()
        self.pair_dead = 0

    # ------------------------------------------------------------------ the trees
    cdef void _rebuild_term(self, uint32_t slot) noexcept nogil:
        """The term's live postings (tree and tail) into one tree; dead flat entries dropped.  The
        binary k-d tree is built over the scratch copies, then stored as wide nodes."""
        cdef ConeTermC* ct = &self.terms[slot]
        cdef size_t i, kept = 0
        cdef ConeFullC f
        self.build_posts.clear()
        for i in range(ct.posts.size()):
            if self.ver[ct.posts[i].sid] == ct.posts[i].ver:
                f.post = ct.posts[i]
                f.x = ct.keys[i >> 2].x[i & 3]
                f.y = ct.keys[i >> 2].y[i & 3]
                f.rho = ct.keys[i >> 2].rho[i & 3]
                f.lam = ct.keys[i >> 2].lam[i & 3]
                self.build_posts.push_back(f)
        for i in range(ct.flat.size()):
            if self.gen[ct.flat[i].sid] == ct.flat[i].gen:
                ct.flat[kept] = ct.flat[i]
                kept += 1
        ct.flat.resize(kept)
        ct.dead = 0
        ct.tree_n = <uint32_t>self.build_posts.size()
        self.rebuilds += 1
        self.rebuilt_postings += ct.tree_n
        self.build_nodes.clear()
        if ct.tree_n:
            self._build_node(0, ct.tree_n)
        ct.posts.resize(ct.tree_n)
        ct.keys.clear()
        for i in range(ct.tree_n):
            f = self.build_posts[i]
            ct.posts[i] = f.post
            put_key(ct, i, f.x, f.y, f.rho, f.lam)
        ct.wide.clear()
        if ct.tree_n:
            self._build_wide(ct, 0)

    cdef uint32_t _build_wide(self, ConeTermC* ct, uint32_t ni) noexcept nogil:
        """The wide node of build node ni: its children's bounds (a leaf root: one child and an
        empty one, whose bounds reject every message).  Returns its index."""
        cdef ConeWideC w
        cdef uint32_t me = <uint32_t>ct.wide.size()
        cdef uint32_t kids[2]
        cdef const ConeNodeC* c
        cdef int k
        ct.wide.push_back(w)
        if self.build_nodes[ni].right == NO_KIDS:
            kids[0] = ni
            kids[1] = NO_KIDS
        else:
            kids[0] = ni + 1
            kids[1] = self.build_nodes[ni].right
        for k in range(2):
            if kids[k] == NO_KIDS:
                ct.wide[me].minx[k] = ct.wide[me].miny[k] = 0.0
                ct.wide[me].maxx[k] = ct.wide[me].maxy[k] = 0.0
                ct.wide[me].rho_min[k] = INFINITY
                ct.wide[me].lam_max[k] = 0.0
                ct.wide[me].ref[k] = 0
                ct.wide[me].cnt[k] = 0
                continue
            c = &self.build_nodes[kids[k]]
            ct.wide[me].minx[k] = c.minx
            ct.wide[me].miny[k] = c.miny
            ct.wide[me].maxx[k] = c.maxx
            ct.wide[me].maxy[k] = c.maxy
            ct.wide[me].rho_min[k] = c.rho_min
            ct.wide[me].lam_max[k] = c.lam_max
            if c.right == NO_KIDS:
                ct.wide[me].ref[k] = c.lo
                ct.wide[me].cnt[k] = c.hi - c.lo
            else:
                ct.wide[me].cnt[k] = 0
                ct.wide[me].ref[k] = self._build_wide(ct, kids[k])
        return me

    def build(self):
        """Every term's tree rebuilt over its live postings (a static layout for the benches)."""
        cdef uint32_t slot
        with nogil:
            for slot in range(<uint32_t>self.terms.size()):
                self._rebuild_term(slot)

    def build_from_table(self):
        """Bench hook (scan-only, ``bench/scan_cone.py``): index every live subscription of a
        table that another index owns, at its current theta, then build every tree.  The table's
        theta_idx (the owner's) is left as it was; this index must not hear of later changes."""
        cdef vector[sid_t] sids
        cdef vector[double] saved
        cdef sid_t sid
        cdef size_t i
        with nogil:
            for sid in range(<sid_t>self.table.hot.size()):
                if self.table.hot[sid].alive:
                    sids.push_back(sid)
                    saved.push_back(self.table.theta_idx[sid])
            if sids.size():
                self.add_many(sids.data(), sids.size())
            for i in range(sids.size()):
                self.table.theta_idx[sids[i]] = saved[i]
        self.build()

    cdef void _build_node(self, uint32_t lo, uint32_t hi) noexcept nogil:
        cdef ConeNodeC nd
        cdef uint32_t i, half, n = hi - lo, me
        cdef double sx, sy, sr, kmin, kmax
        cdef int dim
        cdef vector[pair[double, uint32_t]] keyed
        cdef vector[ConeFullC] tmp
        cdef const ConeFullC* p
        nd.minx = INFINITY
        nd.miny = INFINITY
        nd.maxx = -INFINITY
        nd.maxy = -INFINITY
        nd.rho_min = INFINITY
        nd.lam_max = -INFINITY
        kmin = INFINITY
        kmax = -INFINITY
        for i in range(lo, hi):
            p = &self.build_posts[i]
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
        me = <uint32_t>self.build_nodes.size()
        self.build_nodes.push_back(nd)
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
            keyed.push_back(pair[double, uint32_t](split_key(&self.build_posts[i], dim, self.rho_scale), i - lo))
        std_sort(keyed.begin(), keyed.end())   # (key, position): ties keep the array order
        for i in range(n):
            tmp.push_back(self.build_posts[lo + keyed[i].second])
        for i in range(n):
            self.build_posts[lo + i] = tmp[i]
        half = ((n // 2 + <uint32_t>self.leaf - 1) // <uint32_t>self.leaf) * <uint32_t>self.leaf
        if half < <uint32_t>self.leaf:
            half = <uint32_t>self.leaf
        if half > n - 1:
            half = n - 1
        self._build_node(lo, lo + half)
        self.build_nodes[me].right = <uint32_t>self.build_nodes.size()
        self._build_node(lo + half, hi)

    # ------------------------------------------------------------------ introspection
    cdef size_t memory(self) noexcept nogil:
        cdef size_t total = 0, k
        for k in range(self.terms.size()):
            total += (self.terms[k].posts.capacity() * sizeof(ConePostC)
                      + self.terms[k].keys.capacity() * sizeof(ConeKeyLineC)
                      + self.terms[k].wide.capacity() * sizeof(ConeWideC)
                      + self.terms[k].flat.capacity() * sizeof(FlatC) + sizeof(ConeTermC))
        for k in range(self.plists.size()):
            total += self.plists[k].capacity() * sizeof(PairEntC) + sizeof(vector[PairEntC])
        return (total + self.pslots.capacity() * sizeof(PairSlotC) + self.term_slot.size() * 32
                + self.dense_slot.capacity() * 4
                + self.ver.capacity() * 9)

    def structure(self):
        """Sizes of the layout (conecheck.structure)."""
        from skype._core.conecheck import structure
        return structure(self)

    def check_invariants(self):
        """The layout's invariants (conecheck.check_invariants); True or AssertionError."""
        from skype._core.conecheck import check_invariants
        return check_invariants(self)
