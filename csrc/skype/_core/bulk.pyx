# cython: language_level=3
"""Bulk registration: many subscriptions into a full window in one pass over the window.

The per-subscription path (``Buffers.init_sub``) runs one best-first message-index search per
subscription.  Here, for a batch S of new subscriptions:

1. A temporary subscription index (the engine's kind, built by the engine's factory) holds S
   only, with every theta_s = 0.  Scores are >= 0, so every message sharing a term with s
   qualifies at first.
2. The window's messages are replayed through its ``disseminate`` in a seeded random order.
   Each reported (s, m, score) enters s's bounded heap of capacity C_s, ordered by the full
   ranking key (score desc, then newer first).  When the heap is full, theta_s is raised to the
   score of its worst entry (``theta_changed``).
3. Each heap, sorted into ranking order, is the run that ``Buffers.init_sub_from`` scans in
   place of the message index: the same scan, the same threshold choice, the same buffer.

Exactness.  Invariant: at every moment theta_s <= the C_s-th best score (full key) among the
messages of the window replayed so far, hence <= the C_s-th best score of the whole window
(the best C_s of a superset are at least as good).  A message the temporary index does not
report scores < theta_s (the index reports every s with ST(s, m) >= theta_s), so it is not in
s's final top-C_s; every message it does report is offered to the heap, which keeps the best
C_s by the full key (a total order: seqs are unique).  So the final heap is exactly the first
C_s messages of s's ranking order, or every match when the heap is not full.  When the scan
needs more than C_s messages of a full heap, ``_next`` (reevaluation.pyx) restarts the
message index and skips the first C_s (counted in ``bulk_fallbacks``).  The replay order only
changes how fast the thresholds rise, never the result.

Capacity C_s: exact and kmax need their cap (k, or max(kmax, k)) and never fall back;
cSkyband's cost scan stops after a few cost increases, at most ``nmax_factor * k`` messages
plus ties; Skyband needs k plus every message down to ratio * kScore.  Both skyband kinds use
``bulk_factor * k`` (default 2, capped at the scan's own limit) plus ``BULK_TIES``, and fall
back beyond; for cSkyband the engine raises bulk_factor to 1.25x the upper quartile of the scans
(per k) of the last 16 of the 32 subscriptions it initialises first on the per-subscription path
(the cost scan goes further when a query costs more, e.g. in a larger window).  Measured on
tweets (k = 20): cSkyband never fell back at 20k, 40k and 100k subscriptions; Skyband fell
back for 70% of them, so the engine keeps Skyband on the per-subscription path unless told
otherwise.
The engine splits a batch so that the heaps of one pass hold at most ``budget`` entries
(12 bytes each), one replay per part.  With ``batch`` > 1 the replay disseminates that many
messages at a time (``disseminate_batch``: micro-batching), each against the thresholds before
its batch: lower than or equal to the current ones, so the index reports a superset, and the
heaps keep the same best C_s.
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from skype._core.types cimport sid_t, seq_t, MsgTermC, prefetch, now_ns
from skype._core.window cimport WindowStore, MsgC, win_get, win_terms
from skype._core.subindex cimport SubTable, SubscriptionIndex, CandC
from skype._core.buffers cimport Buffers
from skype._core.reevaluation cimport RankedC, BUF_CSKYBAND, BUF_EXACT, BUF_KMAX, BUF_SKYBAND

cdef enum:
    BULK_TIES = 16          # extra heap slots of the skyband kinds, for ties at the scan's end
    PREFETCH_FAR = 16       # replay: heap records fetched this many offers ahead
    PREFETCH_NEAR = 8       # ... and heap roots


cdef struct HeapRefC:       # one subscription's bounded heap in the shared array
    uint64_t base
    uint32_t size
    uint32_t cap


cdef inline bint worse(const RankedC* a, double score, uint32_t seq_lo) noexcept nogil:
    """a ranks below (score, seq_lo): lower score, or the same score and older."""
    return a.score < score or (a.score == score and <int32_t>(seq_lo - a.seq_lo) > 0)


cdef inline bint ranks_before(const RankedC& a, const RankedC& b) noexcept nogil:
    return a.score > b.score or (a.score == b.score and <int32_t>(a.seq_lo - b.seq_lo) > 0)


cdef inline void sift_down(RankedC* h, uint32_t n, uint32_t i) noexcept nogil:
    """Min-heap on the ranking key (the worst entry at the root)."""
    cdef RankedC v = h[i]
    cdef uint32_t c
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and worse(&h[c + 1], h[c].score, h[c].seq_lo):
            c += 1
        if not worse(&h[c], v.score, v.seq_lo):
            break
        h[i] = h[c]
        i = c
    h[i] = v


cdef inline void sift_up(RankedC* h, uint32_t i) noexcept nogil:
    cdef RankedC v = h[i]
    cdef uint32_t p
    while i > 0:
        p = (i - 1) >> 1
        if not worse(&v, h[p].score, h[p].seq_lo):
            break
        h[i] = h[p]
        i = p
    h[i] = v


cdef inline void prefetch_heap(const RankedC* heaps, const HeapRefC* hr) noexcept nogil:
    """A sift-down walks the whole depth of a small heap: fetch all of it (up to 16 lines)."""
    cdef const char* p = <const char*>&heaps[hr.base]
    cdef size_t nbytes = hr.size * sizeof(RankedC), o = 0
    if nbytes > 1024:
        nbytes = 1024
    while True:
        prefetch(p + o)
        o += 64
        if o >= nbytes:
            break


cdef uint32_t bulk_capacity(Buffers b, int32_t k) noexcept nogil:
    """C_s for a subscription with this k (see the module comment)."""
    cdef int64_t c
    if b.kind == BUF_EXACT or b.kind == BUF_KMAX:
        return <uint32_t>(k if (b.kind == BUF_EXACT or b.kmax < k) else b.kmax)
    c = <int64_t>b.bulk_factor * k
    if b.kind != BUF_SKYBAND and c > <int64_t>b.nmax_factor * k:
        c = <int64_t>b.nmax_factor * k
    if c < k:
        c = k
    return <uint32_t>(c + BULK_TIES)


cdef void offer_all(vector[HeapRefC]* ref, RankedC* heaps, SubTable table, SubscriptionIndex tmp,
                    const CandC* out, size_t nout, uint32_t lo) noexcept nogil:
    """Offer one replayed message (low seq bits lo) to the heaps of its candidates."""
    cdef size_t j
    cdef HeapRefC* hr
    cdef RankedC* h
    cdef CandC c
    # the heaps are cache misses at scale: their records PREFETCH_FAR ahead, their roots
    # PREFETCH_NEAR ahead
    for j in range(nout if nout < PREFETCH_FAR else PREFETCH_FAR):
        prefetch(&ref[0][out[j].sid])
    for j in range(nout if nout < PREFETCH_NEAR else PREFETCH_NEAR):
        prefetch_heap(heaps, &ref[0][out[j].sid])
    for j in range(nout):
        if j + PREFETCH_FAR < nout:
            prefetch(&ref[0][out[j + PREFETCH_FAR].sid])
        if j + PREFETCH_NEAR < nout:
            prefetch_heap(heaps, &ref[0][out[j + PREFETCH_NEAR].sid])
        c = out[j]
        hr = &ref[0][c.sid]
        h = &heaps[hr.base]
        if hr.size < hr.cap:
            h[hr.size].score = c.score
            h[hr.size].seq_lo = lo
            sift_up(h, hr.size)
            hr.size += 1
            if hr.size < hr.cap:
                continue
        elif worse(h, c.score, lo):
            h[0].score = c.score
            h[0].seq_lo = lo
            sift_down(h, hr.size, 0)
        else:
            continue
        # full: theta = the worst kept score, a lower bound of the final C-th best.  The
        # exact check reads hot.theta at once; the index hears of a raise as often as it
        # asks (``replay_raise_at``: a raise may re-sort posting entries)
        if h[0].score > table.hot[c.sid].theta:
            table.hot[c.sid].theta = h[0].score
            if h[0].score > tmp.replay_raise_at(table.theta_idx[c.sid]):
                tmp.theta_changed(c.sid)


cdef uint64_t bulk_replay(Buffers b, SubscriptionIndex tmp, SubTable table, WindowStore window,
                          const sid_t* sids, size_t n, uint64_t seed, size_t batch, double* build_ns) noexcept nogil:
    """Initialise the buffers of sids[0:n] (in the table, in no index) from one replay of the
    window through ``tmp`` (empty, of the engine's index kind), ``batch`` messages at a time.
    Returns the (s, m) pairs the replay offered to the heaps; adds the time of step 3 to
    build_ns."""
    cdef vector[HeapRefC] ref              # per sid (slot of the table): its heap
    cdef vector[RankedC] heaps
    cdef vector[uint32_t] order
    cdef size_t i, j, q, nb, count = window.count
    cdef uint64_t total = 0, x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull
    cdef sid_t sid
    cdef HeapRefC* hr
    cdef seq_t oldest = window.oldest_seq, seq
    cdef MsgC* m
    cdef const MsgTermC* mt
    cdef RankedC* h
    cdef uint32_t r
    cdef uint64_t offers = 0
    cdef vector[MsgTermC] bterms           # micro-batches: the batch's messages' terms
    cdef vector[size_t] boffs
    cdef vector[double] bx, by
    cdef double t0
    ref.resize(table.hot.size())
    for i in range(n):
        sid = sids[i]
        ref[sid].base = total
        ref[sid].size = 0
        ref[sid].cap = bulk_capacity(b, table.hot[sid].k)
        total += ref[sid].cap
        table.hot[sid].theta = 0.0
        table.theta_idx[sid] = 0.0
    heaps.resize(total)
    tmp.add_many(sids, n)
    # a seeded random replay order (Fisher-Yates with xorshift64*)
    order.resize(count)
    for i in range(count):
        order[i] = <uint32_t>i
    i = count
    while i > 1:
        i -= 1
        x ^= x >> 12
        x ^= x << 25
        x ^= x >> 27
        j = <size_t>((x * 0x2545F4914F6CDD1Dull) % (i + 1))
        r = order[i]
        order[i] = order[j]
        order[j] = r
    i = 0
    while i < count:
        if batch <= 1:
            seq = oldest + order[i]
            m = win_get(window, seq)
            tmp.disseminate(win_terms(window, m), <int>m.nterms, m.x, m.y)
            offers += tmp.out.size()
            offer_all(&ref, heaps.data(), table, tmp, tmp.out.data(), tmp.out.size(), <uint32_t>seq)
            i += 1
            continue
        nb = batch if batch < count - i else count - i
        bterms.clear()
        boffs.clear()
        boffs.push_back(0)
        bx.clear()
        by.clear()
        for q in range(nb):
            m = win_get(window, oldest + order[i + q])
            mt = win_terms(window, m)
            bterms.insert(bterms.end(), mt, mt + m.nterms)
            boffs.push_back(bterms.size())
            bx.push_back(m.x)
            by.push_back(m.y)
        tmp.disseminate_batch(bterms.data(), boffs.data(), bx.data(), by.data(), nb)
        for q in range(nb):
            offers += tmp.batch_off[q + 1] - tmp.batch_off[q]
            offer_all(&ref, heaps.data(), table, tmp, tmp.batch_out.data() + tmp.batch_off[q],
                      tmp.batch_off[q + 1] - tmp.batch_off[q], <uint32_t>(oldest + order[i + q]))
        i += nb
    # the buffers, from the runs in ranking order
    t0 = now_ns()
    for i in range(n):
        sid = sids[i]
        table.hot[sid].theta = 0.0
        table.theta_idx[sid] = 0.0
        hr = &ref[sid]
        h = &heaps[hr.base]
        std_sort(h, h + hr.size, ranks_before)
        b.init_sub_from(sid, h, hr.size, hr.size == hr.cap)
    build_ns[0] += now_ns() - t0
    return offers


cdef void sample_then_rest(Buffers b, SubTable table, vector[sid_t]& sids, vector[sid_t]& rest,
                           bint adapt) noexcept nogil:
    """The first step of a bulk registration: cSkyband's cost model needs C_q, the mean work of
    a message-index query; with no estimate yet, a spread sample of 32 of ``sids`` takes the
    per-subscription path (``init_sub``) first, and the others go to ``rest`` for the bulk
    passes.  With ``adapt``, the sample's scans size the runs: ``bulk_factor`` becomes at
    least 1.25x the upper quartile of the scans (per k) of its second half (the first half
    scans with an unsettled C_q), so that fallbacks stay rare when the cost model scans
    further (a larger window, a larger C_q)."""
    cdef size_t n = sids.size(), i, SAMPLE = 32
    cdef size_t stride = n // SAMPLE if b.kind == BUF_CSKYBAND and b.n_queries == 0 else 0
    cdef double worst = 0.0
    cdef vector[double] ratios
    for i in range(n):
        if stride and i % stride == 0 and i // stride < SAMPLE:
            b.init_sub(sids[i])
            if i // stride >= SAMPLE // 2:      # C_q has settled: scans as in bulk
                ratios.push_back(<double>b.last_scan / table.hot[sids[i]].k)
        else:
            rest.push_back(sids[i])
    if ratios.size():
        std_sort(ratios.begin(), ratios.end())
        worst = ratios[(ratios.size() * 3) // 4]
    if stride and adapt and <int>(1.25 * worst + 1.0) > b.bulk_factor:
        b.bulk_factor = <int>(1.25 * worst + 1.0)
