# cython: language_level=3
"""Result buffers: the per-subscription state that yields the exact top-k (spec §4).

Every buffer is an array sorted by (score desc, seq desc), so the top-k is its first k entries;
its storage, holder handles, events and theta publication are BufferStore's (bufstore.pyx), and
its re-evaluation (the pull in ranking order that chooses theta and rebuilds the buffer) is
Reevaluation's (reevaluation.pyx): the base classes.  This module holds what differs per kind on
the stream: admission, expiry, the floors and registration.
Invariants per kind, with theta_s the threshold the subscription index prunes against:

* ``exact``: the buffer is the exact top-k of the window, or (``complete``) every match when
  fewer than k match.  theta = the k-th score once k are held, else 0.  Expiry of a held message
  re-evaluates unless ``complete``.
* ``kmax`` (Yi et al.): the buffer is the exact top-k' of the window, k <= k' <= kmax; theta = the
  k'-th score.  Arrivals above it insert (k' grows, capped at kmax); expiry shrinks k' and
  re-evaluates the top-kmax when k' < k.
* ``skyband`` (Mouratidis et al.) and ``cskyband`` (Skype): the buffer is the partial k-skyband
  B = SB_k(W) ∩ {m : ST(s, m) >= theta} with dominance counters (Def. 10: newer and scoring
  >= dominates).  Thm 6.1: while |B| >= k the top-k is B's first k entries; when expiry leaves
  |B| < k the subscription is re-evaluated (Alg. 2).  Skyband sets theta = ratio * kScore at the
  re-evaluation; cSkyband chooses theta by the cost model of §4.3 (costmodel.pxd) while pulling
  messages in ranking order (one traversal chooses theta and rebuilds B: reevaluation.pyx).
* ``complete`` (theta = 0): the buffer holds every match (skyband kinds: the k-skyband of every
  match), so no expiry can require a re-evaluation.  A complete skyband buffer that grows past
  ``refresh_factor * k`` entries is re-evaluated to get a real threshold (a *refresh*); this is
  how subscriptions registered before the window fills acquire thresholds.

Events (+1 entered, -1 left the top-k) are appended to ``events`` for the engine to net per
message.  The reverse map (window ``holders``) gets the subscription for every message that
enters its buffer, and (with ``exact_holders``, the default) loses it when the message leaves the
buffer other than by its own expiry: ``_drop_entry`` (bufstore.pyx) clears the subscription's
entry in the message's holder list (found by sid: entries keep no handle), so at expiry the live entries
are exactly the buffers that hold the message (docs/engine.md, "Expiry visits only live
holders").  Unless ``track_holders`` is off: the engine then finds the holders of an expiring
message by disseminating it again, which relies on the invariant that every buffered entry
scores >= its subscription's current theta (exact: theta is the k-th of at most k entries; kmax:
the last entry; skyband kinds: theta only changes when the buffer is rebuilt from entries >= it;
complete buffers: theta = 0).

**Floors** (``set_floor``, for a caller that knows a lower bound of the score a message needs to
matter to it, e.g. DSkype's global k-th score, docs/dskype-on-spark.md): an arrival scoring below
the subscription's floor is not admitted, and ``skipped_of`` keeps the best score skipped since the
last rebuild.  Invariant: the buffer is the one above with the skipped messages (all scoring below
the floor in force) removed and older entries they would have dominated kept, so every entry
ranking above the current floor is where it would be without floors.  Setting a floor at or below
a skipped score repairs the buffer first.  The skyband kinds keep each subscription's skipped
messages in a side list of ``skipped_cap`` entries (``_list_skipped``; a full list forgets its
expired entries, then drops its lowest score and remembers it in ``dropped_of``); a floor falling
to f re-admits the listed messages scoring >= f still in the window (``_readmit_skipped``: one
k-skyband pass over the buffer and them in ranking order, theta unchanged: listed messages scored
>= theta, which changes only at a rebuild, and a rebuild empties the list), unless the list
dropped a score >= f: then, and for exact and kmax buffers (their theta follows the skipped
entries), the buffer is rebuilt (a rebuild pulls every message again).  An expiry that leaves a
skyband buffer fewer than k entries first re-admits its whole side list (``_refill_from_skipped``)
and re-evaluates only if it still holds fewer than k.  Unused, the floor vectors stay empty and
admit pays one size test.
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.math cimport INFINITY
from libc.string cimport memmove
from libc.stdint cimport int32_t, uint16_t, uint32_t
from skype._core.types cimport sid_t, seq_t
from skype._core.arena cimport EntryArena, NO_SLOT
from skype._core.bufstore cimport slot_loose
from skype._core.window cimport WindowStore
from skype._core.ranking cimport WindowRanking
from skype._core.subindex cimport SubTable, SubscriptionIndex
from skype._core.costmodel cimport BARRIER_STATIONARY, BARRIER_WINDOW, BARRIER_FACTOR
from skype._core.reevaluation cimport skyband_dominators

cdef bint guided_default = True
cdef size_t ahead_records_default = 8, ahead_entries_default = 4


def set_admission_guide(bint on):
    """For A/B benches: buffers created after this call start an admission at the record's guide
    point (on, the default) or search the whole buffer (off).  Results are the same either way."""
    global guided_default
    guided_default = on


def set_prefetch_distance(size_t records, size_t entries):
    """For A/B benches: buffers created after this call have their records fetched ``records``
    admissions (or expiry visits) ahead and their entries ``entries`` ahead (default 8 and 4)."""
    global ahead_records_default, ahead_entries_default
    if not 0 < entries <= records:
        raise ValueError("need 0 < entries <= records")
    ahead_records_default = records
    ahead_entries_default = entries


KINDS = {"exact": BUF_EXACT, "cskyband": BUF_CSKYBAND, "skyband": BUF_SKYBAND, "kmax": BUF_KMAX}
BARRIERS = {"stationary": BARRIER_STATIONARY, "window": BARRIER_WINDOW, "factor": BARRIER_FACTOR}


cdef inline bint seq_newer(uint32_t a, uint32_t b) noexcept nogil:
    return <int32_t>(a - b) > 0


cdef inline size_t insert_pos(const BufEntryC* B, size_t n, double score) noexcept nogil:
    """Where a new (newest) message with this score goes: before every entry scoring <= it."""
    cdef size_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if B[mid].score > score:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline bint ranked_before(const PulledC& a, const PulledC& b) noexcept nogil:
    """The ranking order (score desc, seq desc)."""
    return a.score > b.score or (a.score == b.score and a.seq > b.seq)


cdef class Buffers(Reevaluation):
    def __cinit__(self, str kind, SubTable table, SubscriptionIndex index, WindowRanking msgs,
                  WindowStore window, double window_n, double skyband_ratio=0.8, int kmax=60,
                  double c_ins=1.0, double c_del=1.0, double query_cost=10.0, str barrier="stationary",
                  double barrier_factor=2.0, int stop_after=3, int nmax_factor=20,
                  double refresh_factor=3.0, bint count_window=True, int bulk_factor=2,
                  bint track_holders=True, bint exact_holders=True):
        self.kind = KINDS[kind]
        self.count_window = count_window
        self.table = table
        self.index = index
        self.msgs = msgs
        self.window = window
        self.model.window_n = window_n
        self.model.p_arrival = 0.5
        self.model.p_expiry = 0.5
        self.skyband_ratio = skyband_ratio
        self.kmax = kmax
        self.model.c_ins = c_ins
        self.model.c_del = c_del
        self.query_cost = query_cost
        self.model.barrier = BARRIERS[barrier]
        self.model.barrier_factor = barrier_factor
        self.stop_after = stop_after
        self.nmax_factor = nmax_factor
        self.refresh_factor = refresh_factor
        self.n_reevaluations = 0
        self.n_refreshes = 0
        self.n_initializations = 0
        self.n_admits = 0
        self.reeval_work = 0
        self.n_queries = 0
        self.cq_mean = 0.0
        self.src = NULL
        self.bulk_factor = bulk_factor
        self.track_holders = track_holders
        self.exact_holders = track_holders and exact_holders
        self.n_admits_topk = 0
        self.n_holders_dropped = 0
        self.timed = False
        self.reeval_ns = 0
        self.n_bulk_inits = 0
        self.n_bulk_fallbacks = 0
        self.arena = EntryArena()
        self.n_floor_skips = 0
        self.n_floor_repairs = 0
        self.skipped_cap = 32
        self.n_floor_readmits = 0
        self.n_floor_readmitted = 0
        self.floor_readmit_work = 0
        self.n_floor_refills = 0
        self.guided = guided_default
        self.ahead_records = ahead_records_default
        self.ahead_entries = ahead_entries_default
        self.n_admit_span = 0
        self.n_admit_pos = 0
        self.n_admit_size = 0
        self.n_admit_evicted = 0
        self.n_guide_misses = 0

    cdef void _update_theta(self, sid_t sid) noexcept nogil:
        """exact and kmax: theta follows the buffer (skyband kinds change it at re-evaluation)."""
        cdef SubBufC* sb = &self.buf[sid]
        cdef const BufEntryC* B = self._entries(sb)
        if self.kind == BUF_EXACT:
            if <int32_t>sb.size >= sb.k:
                sb.complete = 0
                self._set_theta(sid, B[sb.k - 1].score, True)
            elif sb.complete:
                self._set_theta(sid, 0.0, True)
        elif self.kind == BUF_KMAX:
            if <int32_t>sb.size >= self._cap(sb.k):
                sb.complete = 0
            if sb.complete:
                self._set_theta(sid, 0.0, True)
            elif sb.size:
                self._set_theta(sid, B[sb.size - 1].score, True)

    # ------------------------------------------------------------------ API for the engine
    cdef void init_sub(self, sid_t sid) noexcept nogil:
        """A new subscription: its buffer from the current window (Alg. 2 lines 3-5 with
        |B_0| = 0).  The index does not hold it yet: theta is written to the table only."""
        self._init_state(sid)
        self._reevaluate(sid, False, False)
        self.n_initializations += 1

    cdef void init_sub_from(self, sid_t sid, const RankedC* run, size_t n, bint truncated) noexcept nogil:
        """init_sub, with the first n messages of sid's ranking order given (bulk.pyx): the same
        scan and the same buffer, from ``run`` instead of the message index.  ``truncated``: the
        window may hold more matches than the run (the scan then falls back, see _next)."""
        self._init_state(sid)
        self._reevaluate_from(sid, run, n, truncated)
        self.n_initializations += 1
        self.n_bulk_inits += 1

    cdef void _init_state(self, sid_t sid) noexcept nogil:
        cdef SubBufC* sb
        self.ensure(sid)
        sb = &self.buf[sid]
        sb.size = 0
        sb.k = self.table.hot[sid].k
        sb.complete = 1
        sb.cq = 0
        sb.refresh_at = 0
        sb.p_theta = 0
        sb.born = 0
        sb.admits = 0
        sb.retune_at = 0
        if sid < self.floor_of.size():
            self.floor_of[sid] = -INFINITY              # a new record has no floor yet

    cdef void drop_sub(self, sid_t sid) noexcept nogil:
        cdef const BufEntryC* B = self._entries(&self.buf[sid])
        cdef size_t i
        for i in range(self.buf[sid].size):
            self._drop_entry(sid, B[i].seq_lo)
        self._release(&self.buf[sid])
        self.buf[sid].complete = 1
        if sid < self.floor_of.size():
            self.floor_of[sid] = -INFINITY
            self.skipped_of[sid] = -INFINITY
            self._clear_skipped(sid)

    cdef void _rebuild(self, sid_t sid, bint emit, bint notify) noexcept nogil:
        """Reevaluation._rebuild, after forgetting what the floors skipped: the pull sees every
        message again."""
        if sid < self.skipped_of.size():
            self.skipped_of[sid] = -INFINITY            # the pull below sees every message again
            self._clear_skipped(sid)
        Reevaluation._rebuild(self, sid, emit, notify)

    cdef void set_floor(self, sid_t sid, double floor) noexcept nogil:
        """From now on an arrival scoring below ``floor`` may be skipped (module docstring); a
        message skipped earlier that scores >= ``floor`` could matter again: re-admit it from
        the side list, or rebuild when the list cannot."""
        if sid >= self.floor_of.size():
            self.floor_of.resize(sid + 1, -INFINITY)
            self.skipped_of.resize(sid + 1, -INFINITY)
        if self.skipped_of[sid] > -INFINITY and self.skipped_of[sid] >= floor:  # -inf: nothing skipped
            if (sid < self.skipped_list.size() and (self.kind == BUF_SKYBAND or self.kind == BUF_CSKYBAND)
                    and (self.dropped_of[sid] == -INFINITY or self.dropped_of[sid] < floor)):
                self._readmit_skipped(sid, floor)
                self.n_floor_readmits += 1
            else:
                self._reevaluate(sid, True, True)
                self.n_floor_repairs += 1
        self.floor_of[sid] = floor

    cdef void _clear_skipped(self, sid_t sid) noexcept nogil:
        if sid < self.skipped_list.size():
            self.skipped_list[sid].clear()
            self.dropped_of[sid] = -INFINITY

    cdef void _list_skipped(self, sid_t sid, seq_t seq, double score) noexcept nogil:
        """Keep a skipped arrival in ``sid``'s side list (module docstring)."""
        cdef vector[PulledC]* side
        cdef size_t i, w = 0, low = 0
        if self.skipped_cap <= 0 or self.kind == BUF_EXACT or self.kind == BUF_KMAX:
            return                                  # no list: a lowered floor rebuilds (set_floor)
        if sid >= self.skipped_list.size():
            self.skipped_list.resize(sid + 1)
            self.dropped_of.resize(sid + 1, -INFINITY)
        side = &self.skipped_list[sid]
        if <int32_t>side.size() >= self.skipped_cap:  # full: forget the expired entries first
            for i in range(side.size()):
                if side[0][i].seq >= self.window.oldest_seq:
                    side[0][w] = side[0][i]
                    w += 1
            side.resize(w)
        if <int32_t>side.size() < self.skipped_cap:
            side.push_back(PulledC(seq, score))
            return
        for i in range(1, side.size()):
            if side[0][i].score < side[0][low].score:
                low = i
        if side[0][low].score < score:              # keep the higher: drop the list's lowest
            if side[0][low].score > self.dropped_of[sid]:
                self.dropped_of[sid] = side[0][low].score
            side[0][low] = PulledC(seq, score)
        elif score > self.dropped_of[sid]:
            self.dropped_of[sid] = score

    cdef bint _refill_from_skipped(self, sid_t sid) noexcept nogil:
        """An expiry left fewer than k entries: re-admit the whole side list first.  The buffer
        stays the one without floors less skipped messages scoring below the floor (those the
        list dropped), the invariant every floored buffer keeps, so with k entries it needs no
        re-evaluation.  True: refilled to k entries (the floor stays; ``dropped_of`` still makes
        a floor falling to a dropped score rebuild)."""
        if sid >= self.skipped_list.size() or self.skipped_list[sid].empty():
            return False
        self._readmit_skipped(sid, -INFINITY)
        self.n_floor_refills += 1
        return <int32_t>self.buf[sid].size >= self.buf[sid].k

    cdef void _readmit_skipped(self, sid_t sid, double floor) noexcept nogil:
        """The floor falls to ``floor`` and the side list holds every skipped message scoring
        >= it: re-admit those still in the window.  The buffer and them, in ranking order, go
        through the k-skyband pass of ``_rebuild`` (the dominance counters of the buffer's
        entries count the re-admitted messages too; dominators of a k-skyband member are
        members, so the pass over members gives their exact counters).  Theta and completeness
        are unchanged; the listed messages below ``floor`` stay listed."""
        cdef SubBufC* sb = &self.buf[sid]
        cdef const BufEntryC* B = self._entries(sb)
        cdef vector[PulledC]* side = &self.skipped_list[sid]
        cdef vector[seq_t]* h = &self.heap
        cdef int32_t k = sb.k
        cdef double rest = self.dropped_of[sid]
        cdef size_t i, w = 0
        cdef uint32_t dc
        cdef BufEntryC e
        self.pulled.clear()
        for i in range(side.size()):
            if side[0][i].seq < self.window.oldest_seq:
                continue                            # expired: gone from the window
            if side[0][i].score >= floor:
                self.pulled.push_back(side[0][i])
            else:
                side[0][w] = side[0][i]
                w += 1
                if side[0][i].score > rest:
                    rest = side[0][i].score
        side.resize(w)
        self.skipped_of[sid] = rest
        if self.pulled.empty():
            return
        self.n_floor_readmitted += self.pulled.size()
        for i in range(sb.size):
            self.pulled.push_back(PulledC(self._full_seq(B[i].seq_lo), B[i].score))
        self.floor_readmit_work += self.pulled.size()
        std_sort(self.pulled.begin(), self.pulled.end(), ranked_before)
        self._remember_holds(sb)
        self.old_seqs.clear()
        for i in range(sb.size if <int32_t>sb.size < k else k):
            self.old_seqs.push_back(B[i].seq_lo)
        self.rebuilt.clear()
        h.clear()
        for i in range(self.pulled.size()):
            dc = skyband_dominators(h, self.pulled[i].seq, k)
            if <int32_t>dc >= k:
                continue
            e.score = self.pulled[i].score
            e.seq_lo = <uint32_t>self.pulled[i].seq
            e.dc = <uint16_t>dc
            self.rebuilt.push_back(e)
        self._store(sb, self.rebuilt.data(), self.rebuilt.size())
        self._hand_over_holds(sid)
        self._diff_events(sid, k)

    cdef void admit(self, sid_t sid, seq_t seq, double score) noexcept nogil:
        """An arriving message scored ``score >= theta_s`` against ``sid``."""
        cdef SubBufC* sb = &self.buf[sid]
        cdef BufEntryC* B = self._entries(sb)
        cdef int32_t k = sb.k, cap
        cdef size_t n = sb.size, pos, i, w, lo = 0
        cdef BufEntryC e
        if sid < self.floor_of.size() and score < self.floor_of[sid]:
            self.n_floor_skips += 1                 # below the floor: cannot matter (set_floor)
            if score > self.skipped_of[sid]:
                self.skipped_of[sid] = score
            self._list_skipped(sid, seq, score)
            return
        if self.guided:
            # the guide point names an entry scoring above score: the insertion lies after it
            # (checked here, so a guide could only cost lines, never a wrong rank)
            lo = guide_start(sb, score)
            if lo:
                if lo < n and B[lo].score > score:
                    lo += 1
                else:
                    lo = 0
                    self.n_guide_misses += 1
        pos = lo + insert_pos(B + lo, n - lo, score)
        self.n_admit_span += n - lo
        self.n_admit_pos += pos
        self.n_admit_size += n
        e.score = score
        e.seq_lo = <uint32_t>seq
        e.dc = 0
        self.n_admits += 1
        if self.kind == BUF_EXACT or self.kind == BUF_KMAX:
            cap = self._cap(k)
            if <int32_t>pos >= cap:
                return
            B = self._room(sb, n + 1)
            memmove(B + pos + 1, B + pos, (n - pos) * sizeof(BufEntryC))
            B[pos] = e
            n += 1
            sb.size = <uint32_t>n
            if self.track_holders:
                self.window.add_holder(seq, sid)
            if <int32_t>pos < k:
                self.n_admits_topk += 1
                self._event(sid, 1, e.seq_lo)
                if <int32_t>n > k:
                    self._event(sid, -1, B[k].seq_lo)
            if <int32_t>n > cap:
                sb.size -= 1
                sb.complete = 0
                self._drop_entry(sid, B[cap].seq_lo)
                self.n_admit_evicted += 1
            self.guide_from(sb, pos)
            self._update_theta(sid)
            return
        # skyband kinds: the new message dominates every (older) entry scoring <= it
        if <int32_t>pos < k:
            self.n_admits_topk += 1
            self._event(sid, 1, e.seq_lo)
            if <int32_t>n >= k:
                self._event(sid, -1, B[k - 1].seq_lo)   # pushed from rank k to k + 1
        w = pos
        for i in range(pos, n):
            B[i].dc += 1
            if <int32_t>B[i].dc < k:
                B[w] = B[i]
                w += 1
            else:
                self._drop_entry(sid, B[i].seq_lo)  # k newer entries dominate it: evicted
        sb.size = <uint32_t>w
        B = self._room(sb, w + 1)
        memmove(B + pos + 1, B + pos, (w - pos) * sizeof(BufEntryC))
        B[pos] = e
        sb.size = <uint32_t>(w + 1)
        if self.track_holders:
            self.window.add_holder(seq, sid)
        self.guide_from(sb, pos)
        self.n_admit_evicted += n - w
        sb.admits += 1
        # Re-tune a buffer whose plan went stale: a complete buffer that outgrew its size, or
        # one admitting over twice the planned rate (thresholds chosen while the window was
        # filling, or a shifted stream).  Any theta <= kScore is valid, so this is a cost
        # decision only.
        if ((sb.complete and sb.size > sb.refresh_at) or
                (sb.retune_at and self.window.count >= sb.retune_at) or
                sb.admits > 3.0 * sb.p_theta * <uint32_t>(<uint32_t>seq - sb.born) + 2 * k):
            self._reevaluate(sid, True, True)
            self.n_refreshes += 1
        elif w < n:
            self._shrink(sb)                        # evictions: the slot may now be loose

    cdef bint expire(self, sid_t sid, seq_t seq) noexcept nogil:
        """The window's oldest message ``seq`` expires; ``sid`` is one of its holders.  False:
        the buffer no longer held it (a stale entry: never with exact holders)."""
        cdef SubBufC* sb = &self.buf[sid]
        cdef BufEntryC* B = self._entries(sb)
        cdef int32_t k = sb.k
        cdef uint32_t lo = <uint32_t>seq
        cdef size_t p = 0, n = sb.size
        while p < n and B[p].seq_lo != lo:
            p += 1
        if p == n:
            return False                           # stale reverse-map entry
        if <int32_t>p < k:
            self._note_gone(seq)
            self._event(sid, -1, lo)
        n -= 1
        memmove(B + p, B + p + 1, (n - p) * sizeof(BufEntryC))
        sb.size = <uint32_t>n
        self.guide_from(sb, p)
        if <int32_t>p < k and <int32_t>n >= k:
            self._event(sid, 1, B[k - 1].seq_lo)
        if <int32_t>n < k and not sb.complete and not self._refill_from_skipped(sid):
            self._reevaluate(sid, True, True)      # Alg. 2
            self.n_reevaluations += 1
        else:
            self._update_theta(sid)
            self._shrink(sb)
        return True

    # ------------------------------------------------------------------ Python access
    def stats(self):
        cdef size_t total = 0, live = 0, sid, loose = 0
        cdef const SubBufC* sb
        for sid in range(self.buf_n):
            if sid < self.table.hot.size() and self.table.hot[sid].alive:
                sb = &self.buf[sid]
                total += sb.size
                live += 1
                # _shrink's rule (bufstore.pxd): no slot is loose unless it is the smallest that fits
                if (sb.slot.cls != NO_SLOT and slot_loose(self.arena.cap[sb.slot.cls], sb.size)
                        and sb.slot.cls != self.arena.class_for(sb.size + 1)):
                    loose += 1
        return {
            "reevaluations": self.n_reevaluations, "threshold_refreshes": self.n_refreshes,
            "initializations": self.n_initializations, "admits": self.n_admits,
            "bulk_initializations": self.n_bulk_inits, "bulk_fallbacks": self.n_bulk_fallbacks,
            "reevaluation_work": self.reeval_work,
            "avg_buffer_size": <double>total / live if live else 0.0, "buffered_entries": total,
            "admits_in_topk": self.n_admits_topk, "holders_dropped": self.n_holders_dropped,
            "exact_holders": bool(self.exact_holders), "reevaluate_seconds": self.reeval_ns / 1e9,
            "loose_slots": loose, "buffer_record_bytes": sizeof(SubBufC),
            "buffer_records_aligned": <size_t>self.buf % 64 == 0,
            "floor_skips": self.n_floor_skips, "floor_repairs": self.n_floor_repairs,
            "floor_readmits": self.n_floor_readmits, "floor_readmitted": self.n_floor_readmitted,
            "floor_readmit_work": self.floor_readmit_work, "floor_refills": self.n_floor_refills,
            "admission_work": {"guided": bool(self.guided), "span_entries": self.n_admit_span,
                               "ranks": self.n_admit_pos, "sizes": self.n_admit_size,
                               "evicted": self.n_admit_evicted, "guide_misses": self.n_guide_misses,
                               "entry_bytes": sizeof(BufEntryC)},
        }
