# cython: language_level=3
"""Registration by search: each new subscription's top-C found by a best-first search of a
static index of the window, instead of replaying the window (bulk.pyx).

Both produce, for a batch of subscriptions registering into a non-empty window, the run that
``Buffers.init_sub_from`` scans: the first C_s messages of s's ranking order (score desc, then
newer first), C_s = ``bulk.bulk_capacity``, or every match when fewer match.  Runs, capacities,
pass boundaries and the order of the ``init_sub_from`` calls are the replay's, so the buffers
(and the reverse map's holder order) are identical; only how the runs are found differs.  The
replay stays: it is the oracle the search is tested against (tests/test_registration_search.py)
and the ``registration="replay"`` path.

This module holds what a search needs whatever the layout of the lists; the layout, a k-d tree
per term, is :class:`~skype._core.regtree.RegistrationTree` (regtree.pyx), which also drives a
batch (``search_register``).  (An earlier layout, weight bands cut into Z-ordered blocks, and
earlier 64-bit masks were removed: ``docs/results/2026-11-29-library.md``.)

Collection (``_collect``, once per batch; the window does not change during a registration).
For every term of the batch's subscriptions that the window holds, its window messages (exact
weight and location, seq) in one array, contiguous per term (``STermC``), in window order: two
passes over the window's (term, message) pairs.  A layout then orders each term's run and puts
a header on each group of entries: the exact bounding box of their locations and their largest
weight (``SBoxC``).

Masks (regmasks.pyx).  Beside the entries, ``masks[p]``: a Bloom filter of the terms of entry
p's message (no false negatives: "may hold t" or "holds no t").  The lists of the terms before
the last of some subscription (scanned for entry items) are also bit-sliced when they hold at
least ``SLICE_MIN`` entries, so ``_scan_entry_items`` finds their entries that may hold a later
term 64 at a time, by the same test as ``may_hold`` on each entry (which it runs on the shorter
lists: a sliced list costs 128 words per 64 entries, 1 KB for a list of one entry).

Search (the layout's ``top_c``): a max-heap of items keyed by an upper bound of their messages'
scores (``_push``/``_pop``); a group whose key is popped is opened, and a leaf's entries are
scored (``_score_block``) into a bounded min-heap of the best C by the full ranking key
(``_offer``).  A message is *designated* to the first term of s (in s's term order) that it
holds, and is scored only when reached through that term's list, so it is offered once.  An
entry of term t_i whose mask has all the bits of a later term of s (it may hold one) is an
*entry item* of its own, pushed at the start with a bound of a message that holds none of
t_0..t_{i-1} (the layout's ``_push_entry_items``: by Cauchy-Schwarz on the later terms whose
bits its mask has, a message's weights having norm 1).  The
groups then hold, for this search, only messages without a later term of s, designated to t_i
or not at all, so TSim = w(t_i,s) * w(t_i,m) <= w(t_i,s) * W for a header of largest weight W:
tight.  With R the group's bounding box, the key is (``_box_bound``)

    alpha * (1 - MINDIST(s, R) / MaxDist) + (1 - alpha) * TSim bound + 1e-12

(MINDIST, the division and the combination are monotone under rounding, so the computed key
is at least the computed score of each of its messages; the slack covers the rounding of the
text sum).  A leaf entry whose mask holds the bits of none of s's other terms holds none: it is
scored from the entry alone, TSim = w(t_i,s) * w(t_i,m), with the operations of
``scoring.score_pair`` (bit-identical).  Otherwise (a real or a false Bloom match) the message's
terms are read from the window for the designation and the exact score (``_score_message``).

Exactness.  The search stops when the heap of C is full and the largest key left is strictly
below its worst score (or nothing is left).  Every message not yet scored has score <= some key
left < the worst kept score, so it ranks below all C kept messages: the kept set is the first C
of the ranking order (a total order: seqs are unique).  An entry or item whose bound is below
the worst kept score is skipped for the same reason (the worst kept score only rises).  With
fewer than C matches nothing is pruned (pruning needs a full heap), so every match is kept.  A
full run (C kept) is marked truncated, as the replay marks a full heap: a scan needing more
falls back to the message index in ``_next`` (reevaluation.pyx), identically.
"""
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, seq_t, SubTermC, MsgTermC
from skype._core.window cimport WindowStore, MsgC, win_get, win_terms
from skype._core.scoring cimport combine, spatial_sim, mindist
from skype._core.subindex cimport SubTable, SubHotC
from skype._core.buffers cimport Buffers
from skype._core.reevaluation cimport RankedC
from skype._core.bufstore cimport SubBufC
from skype._core.arena cimport BufEntryC
from skype._core.regmasks cimport (MASK_HASHES, term_bits, may_hold, bit_positions, slice_list,
                                   scan_slices)

cdef double BOUND_SLACK = 1e-12
cdef uint64_t NO_SLICE = 0xFFFFFFFFFFFFFFFFull  # STermC.slice0 of a term whose list is not sliced
cdef uint64_t SLICE_MIN = 64     # a shorter list is scanned entry by entry (its slices would be mostly padding)

cdef extern from *:
    """
    #include <algorithm>
    /* sort into ranking order: score desc, then newer first (the comparison inlined) */
    template <class T> static inline void skype_sort_ranked(T* first, T* last) {
        std::sort(first, last, [](const T& a, const T& b) {
            return a.score > b.score || (a.score == b.score && a.seq > b.seq);
        });
    }
    """
    void sort_ranked "skype_sort_ranked"(ScoredC* first, ScoredC* last) noexcept nogil


def set_slice_min(uint64_t n):
    """Set the shortest list that is bit-sliced (an A/B hook); returns the previous one."""
    global SLICE_MIN
    cdef uint64_t before = SLICE_MIN
    SLICE_MIN = n
    return before


cdef inline bint worse(const ScoredC* a, double score, seq_t seq) noexcept nogil:
    """a ranks below (score, seq)."""
    return a.score < score or (a.score == score and a.seq < seq)


cdef class RegistrationIndex:
    def __cinit__(self, WindowStore window, double max_dist):
        self.window = window
        self.max_dist = max_dist
        self.n_searches = self.n_items = self.n_blocks = self.n_scored = self.n_fetched = 0
        self.n_pruned_entries = self.n_entry_items = self.n_fetched_alone = self.n_entry_scans = 0
        self.build_ns = 0

    # ------------------------------------------------------------------ collection
    cdef void _collect(self, SubTable table, const sid_t* sids, size_t n) noexcept nogil:
        """Every window message under each term of sids[0:n] that the window holds: the entries
        of a term contiguous (in window order)."""
        cdef size_t i, q, j
        cdef uint32_t u
        cdef term_t t, maxt = 0
        cdef const SubHotC* h
        cdef vector[uint64_t] counts
        cdef MsgC* m
        cdef const MsgTermC* mt
        cdef seq_t oldest = self.window.oldest_seq
        cdef uint64_t total = 0
        cdef STermC* st
        cdef SEntryC* e
        cdef TermBitsC tb, mask
        self.term_slot.clear()
        self.terms.clear()
        self.entries.clear()
        self.masks.clear()
        self.msg_masks.resize(self.window.count)
        for i in range(n):
            h = &table.hot[sids[i]]
            for u in range(h.nterms):
                if table.terms[h.term_off + u].term > maxt:
                    maxt = table.terms[h.term_off + u].term
        self.term_slot.assign(<size_t>maxt + 1, -1)
        counts.assign(<size_t>maxt + 1, 0)
        for i in range(n):
            h = &table.hot[sids[i]]
            for u in range(h.nterms):
                t = table.terms[h.term_off + u].term
                # 1: a term before the last of a subscription, whose list is scanned for entry items
                if u + 1 < h.nterms:
                    self.term_slot[t] = 1
                elif self.term_slot[t] < 0:
                    self.term_slot[t] = 0
        # pass 1: postings per wanted term
        for q in range(self.window.count):
            m = win_get(self.window, oldest + q)
            mt = win_terms(self.window, m)
            for j in range(m.nterms):
                t = mt[j].term
                if t <= maxt and self.term_slot[t] >= 0:
                    counts[t] += 1
        for t in range(<size_t>maxt + 1):
            if self.term_slot[t] >= 0 and counts[t] > 0:
                self.terms.push_back(STermC(total, total, 0, 0, 0 if self.term_slot[t] == 1 else NO_SLICE))
                self.term_slot[t] = <int32_t>self.terms.size() - 1
                total += counts[t]
            else:
                self.term_slot[t] = -1
        # pass 2: the entries (stop is the fill cursor)
        self.entries.resize(total)
        for q in range(self.window.count):
            m = win_get(self.window, oldest + q)
            mt = win_terms(self.window, m)
            mask.lo = mask.hi = 0
            for j in range(m.nterms):
                t = mt[j].term
                # a mask holds the batch's terms only: no other term is ever tested
                if t <= maxt and self.term_slot[t] >= 0:
                    tb = term_bits(t)
                    mask.lo |= tb.lo
                    mask.hi |= tb.hi
            self.msg_masks[q] = mask
            for j in range(m.nterms):
                t = mt[j].term
                if t <= maxt and self.term_slot[t] >= 0:
                    st = &self.terms[self.term_slot[t]]
                    e = &self.entries[st.stop]
                    e.w = mt[j].w
                    e.x = m.x
                    e.y = m.y
                    e.seq_lo = <uint32_t>(oldest + q)
                    st.stop += 1

    # ------------------------------------------------------------------ search
    cdef double _box_bound(self, const SubHotC* h, const SubTermC* terms, uint32_t qi,
                           const SBoxC* box) noexcept nogil:
        """Bound of the block entries scored through the box: messages designated to qi that
        hold no later term of s (the others are entry items), so TSim = w(qi,s) * w <= w(qi,s) * W."""
        cdef double tub = terms[qi].w * box.maxw
        if tub > 1.0:
            tub = 1.0
        return combine(h.alpha, 1.0 - mindist(&box.r, h.x, h.y) / self.max_dist, tub) + BOUND_SLACK

    cdef void _score_message(self, const SubHotC* h, const SubTermC* terms, uint32_t qi, seq_t seq,
                             uint32_t cap) noexcept nogil:
        """Offer message seq, read from the window, if qi is its designated term (the first term
        of s it holds), with its exact score (the operations of ranking.WindowRanking._offer)."""
        cdef MsgC* m = win_get(self.window, seq)
        cdef const MsgTermC* mt = win_terms(self.window, m)
        cdef int a = 0, bi = 0, first = -1, nq = h.nterms, matched = 0
        cdef double acc = 0.0
        self.n_fetched += 1
        while a < nq and bi < <int>m.nterms:
            if terms[a].term == mt[bi].term:
                acc += terms[a].w * mt[bi].w
                matched += 1
                if first < 0:
                    first = a
                a += 1
                bi += 1
            elif terms[a].term < mt[bi].term:
                a += 1
            else:
                bi += 1
        if matched == 1:
            self.n_fetched_alone += 1
        if first != <int>qi:
            return
        self.n_scored += 1
        self._offer(cap, combine(h.alpha, spatial_sim(h.x, h.y, m.x, m.y, self.max_dist), acc), seq)

    cdef void _push(self, double key, uint32_t pos, uint32_t qterm, uint32_t level) noexcept nogil:
        cdef SItemC item = SItemC(key, pos, <uint16_t>qterm, <uint16_t>level)
        cdef size_t i = self.queue.size(), parent
        self.queue.push_back(item)
        while i > 0:
            parent = (i - 1) >> 1
            if self.queue[parent].key >= key:
                break
            self.queue[i] = self.queue[parent]
            i = parent
        self.queue[i] = item

    cdef SItemC _pop(self) noexcept nogil:
        cdef SItemC top = self.queue[0]
        cdef SItemC last = self.queue.back()
        cdef size_t i = 0, c, n
        self.queue.pop_back()
        n = self.queue.size()
        if n:
            while True:
                c = 2 * i + 1
                if c >= n:
                    break
                if c + 1 < n and self.queue[c + 1].key > self.queue[c].key:
                    c += 1
                if self.queue[c].key <= last.key:
                    break
                self.queue[i] = self.queue[c]
                i = c
            self.queue[i] = last
        return top

    cdef void _offer(self, uint32_t cap, double score, seq_t seq) noexcept nogil:
        """Keep the best cap (score, seq) by the ranking key: a min-heap, the worst at the root."""
        cdef ScoredC* hp
        cdef ScoredC v
        cdef size_t i, c, n = self.best.size()
        if n == cap and score < self.best[0].score:
            return
        if n < cap:
            v = ScoredC(score, seq)
            self.best.push_back(v)
            hp = self.best.data()
            i = n
            while i > 0:
                c = (i - 1) >> 1
                if not worse(&v, hp[c].score, hp[c].seq):
                    break
                hp[i] = hp[c]
                i = c
            hp[i] = v
            return
        hp = self.best.data()
        if not worse(&hp[0], score, seq):
            return
        v = ScoredC(score, seq)
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and worse(&hp[c + 1], hp[c].score, hp[c].seq):
                c += 1
            if not worse(&hp[c], v.score, v.seq):
                break
            hp[i] = hp[c]
            i = c
        hp[i] = v

    cdef void _prepare(self, const SubTermC* terms, int nq) noexcept nogil:
        """A new search: empty queue and heap; per query term, its bits and the union of the
        bits of the earlier and of the later terms."""
        cdef int i
        cdef TermBitsC mask
        self.n_searches += 1
        self.queue.clear()
        self.best.clear()
        self.q_bits.resize(nq)
        self.q_pos.assign(nq * MASK_HASHES, -1)
        self.q_before.resize(nq)
        self.q_after.resize(nq)
        mask.lo = mask.hi = 0
        for i in range(nq):
            self.q_bits[i] = term_bits(terms[i].term)
            bit_positions(self.q_bits[i], &self.q_pos[i * MASK_HASHES])
            self.q_before[i] = mask
            mask.lo |= self.q_bits[i].lo
            mask.hi |= self.q_bits[i].hi
        mask.lo = mask.hi = 0
        for i in range(nq - 1, -1, -1):
            self.q_after[i] = mask
            mask.lo |= self.q_bits[i].lo
            mask.hi |= self.q_bits[i].hi

    cdef void _gather_masks(self) noexcept nogil:
        """Once the entries are in place: each entry's mask, from its message's; then, for every
        term scanned for entry items (a term before the last of some subscription), its list's
        masks bit-sliced: row b (a mask bit) holds bit p - first for every entry p whose mask
        has bit b, so the entries whose masks hold all of a term's bits are an AND of its rows."""
        cdef size_t p, nt
        cdef seq_t oldest = self.window.oldest_seq
        cdef STermC* st
        cdef uint64_t total = 0
        self.masks.resize(self.entries.size())
        for p in range(self.entries.size()):
            self.masks[p] = self.msg_masks[<uint32_t>(self.entries[p].seq_lo - <uint32_t>oldest)]
        self.msg_masks.clear()
        self.msg_masks.shrink_to_fit()
        for nt in range(self.terms.size()):
            st = &self.terms[nt]
            if st.slice0 != NO_SLICE and st.stop - st.first >= SLICE_MIN:
                st.slice0 = total
                total += 128 * ((st.stop - st.first + 63) >> 6)
            else:
                st.slice0 = NO_SLICE
        self.slices.assign(total, 0)
        for nt in range(self.terms.size()):
            st = &self.terms[nt]
            if st.slice0 != NO_SLICE:
                slice_list(&self.masks[st.first], st.stop - st.first, self.slices.data() + st.slice0)

    cdef void _scan_entry_items(self, int qi, int nq, const STermC* st) noexcept nogil:
        """The entries of query term qi's list that may hold a later term of s (``may_hold``: the
        mask has all the bits of one of them), in list order, into ``cand``: per 64 entries, the
        OR over the later terms of the AND of their bits' rows."""
        cdef uint64_t p
        cdef TermBitsC after
        self.cand.clear()
        self.n_entry_scans += st.stop - st.first
        if st.slice0 == NO_SLICE:                # a short list: the same test, entry by entry
            after = self.q_after[qi]
            for p in range(st.first, st.stop):
                if may_hold(&self.masks[p], self.q_bits.data(), qi + 1, nq, &after):
                    self.cand.push_back(p)
            return
        scan_slices(self.slices.data() + st.slice0, st.stop - st.first, st.first, self.q_pos.data(), qi + 1, nq,
                    &self.cand)

    cdef int32_t _slot(self, term_t t) noexcept nogil:
        """The index of term t's list, -1 if the window holds none of it (or it is not indexed)."""
        if t >= self.term_slot.size():
            return -1
        return self.term_slot[t]

    cdef void _score_entry_item(self, const SubHotC* h, const SubTermC* terms, const SItemC* it,
                                uint32_t cap) noexcept nogil:
        cdef const SEntryC* e = &self.entries[it.pos]
        cdef seq_t oldest = self.window.oldest_seq
        self._score_message(h, terms, it.qterm, oldest + <uint32_t>(e.seq_lo - <uint32_t>oldest), cap)

    cdef void _score_block(self, const SubHotC* h, const SubTermC* terms, uint32_t qi,
                           uint64_t p0, uint64_t p1, uint32_t cap) noexcept nogil:
        """Score the entries [p0, p1) of query term qi's list designated to qi and holding no
        later term of s (those are entry items)."""
        cdef uint64_t p
        cdef TermBitsC before = self.q_before[qi], after = self.q_after[qi]
        cdef int nq = h.nterms
        cdef const SEntryC* e
        cdef seq_t oldest = self.window.oldest_seq, seq
        cdef double acc, key
        self.n_blocks += 1
        for p in range(p0, p1):
            e = &self.entries[p]
            if may_hold(&self.masks[p], self.q_bits.data(), qi + 1, nq, &after):
                continue                        # an entry item of its own
            seq = oldest + <uint32_t>(e.seq_lo - <uint32_t>oldest)
            if not may_hold(&self.masks[p], self.q_bits.data(), 0, qi, &before):
                # no other term of s: designated here, TSim = w(t,s) * w(t,m) (scoring.text_sim)
                acc = 0.0
                acc += terms[qi].w * e.w
                self.n_scored += 1
                self._offer(cap, combine(h.alpha, spatial_sim(h.x, h.y, e.x, e.y, self.max_dist), acc), seq)
                continue
            # may hold an earlier term (then designated there); holds no later one
            if self.best.size() == cap:
                acc = terms[qi].w * e.w
                if acc > 1.0:
                    acc = 1.0
                key = combine(h.alpha, spatial_sim(h.x, h.y, e.x, e.y, self.max_dist), acc) + BOUND_SLACK
                if key < self.best[0].score:
                    self.n_pruned_entries += 1
                    continue
            self._score_message(h, terms, qi, seq, cap)

    cdef void _emit(self, vector[RankedC]* out) noexcept nogil:
        """Append the kept messages to out in ranking order."""
        cdef size_t r
        sort_ranked(self.best.data(), self.best.data() + self.best.size())
        for r in range(self.best.size()):
            out.push_back(RankedC(self.best[r].score, <uint32_t>self.best[r].seq))

    # ------------------------------------------------------------------ Python access
    def memory_bytes(self):
        return (self.entries.capacity() * sizeof(SEntryC) + self.masks.capacity() * sizeof(TermBitsC)
                + self.slices.capacity() * 8 + self.terms.capacity() * sizeof(STermC) + self.term_slot.capacity() * 4)

    def stats(self):
        return {"searches": self.n_searches, "items": self.n_items, "blocks": self.n_blocks,
                "scored": self.n_scored, "fetched": self.n_fetched, "entries_pruned": self.n_pruned_entries,
                "entry_items": self.n_entry_items, "fetched_alone": self.n_fetched_alone,
                "entry_scans": self.n_entry_scans,
                "entries": self.entries.size(), "index_seconds": self.build_ns / 1e9}


def buffer_state(Buffers b, sid_t sid):
    """A buffer's whole state, for comparing registration paths in tests: its entries
    (seq_lo, score, dominance count), complete flag, k, the cost model's C_q, the refresh,
    retune and plan fields, and the subscription's threshold."""
    cdef SubBufC* sb = &b.buf[sid]
    cdef const BufEntryC* B = b._entries(sb)
    cdef size_t i
    entries = [(B[i].seq_lo, B[i].score, B[i].dc) for i in range(sb.size)]
    return {"entries": entries, "complete": bool(sb.complete), "k": sb.k, "cq": sb.cq,
            "refresh_at": sb.refresh_at, "retune_at": sb.retune_at, "p_theta": sb.p_theta, "born": sb.born,
            "theta": b.table.hot[sid].theta}
