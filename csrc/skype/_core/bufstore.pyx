# cython: language_level=3
"""Result buffers' storage and reverse map: what every buffer kind shares (buffers.pyx, reevaluation.pyx).

Each subscription has a SubBufC record (``buf[sid]``) whose entries live in one slot of the
arena (arena.pyx), sorted by (score desc, seq desc).  ``_room`` moves a buffer to a larger slot
class only when it outgrows its own (a slot given back is filled by its class's last slot, whose
record ``_give`` updates: arena.pyx); ``_store`` puts a rebuilt buffer in the smallest class that
holds one more entry; ``_shrink`` moves a buffer that lost entries there once its slot is loose
(``slot_loose``: 1.5 times what it needs).  The records are 64-byte lines in one aligned array
(``ensure``).  Invariants kept here:

* Reverse map (``track_holders``): every entry of every buffer has a live entry (its sid) in the
  window's holder list of its message.  With ``exact_holders`` an entry that leaves its buffer
  while its message stays in the window clears that holder entry (``_drop_entry``: the window
  finds it by (message, sid), ``drop_holder_of``; entries keep no handle, 14 bytes instead of
  18), so at expiry the live holder entries are exactly the buffers that still hold the message,
  each once.  A rebuild hands the holders over (``_remember_holds`` before, ``_hand_over_holds``
  after): kept messages keep their holder entry, new ones get one, lost ones are dropped.
* Events: every change of a top-k appends (sid, +1/-1, message seq) to ``events``; the engine
  resolves the seqs to external ids once per message (``resolve_events``: one prefetched pass
  over the window records, instead of a random read on every admission's critical path) and
  nets them (flush.pyx).  Every seq an event names is in the window at the flush, except the
  messages that expired during the operation: ``_note_gone`` keeps their ids (buffers.pyx calls
  it before an expiring message's event).
* Guide: a record's ``guide`` (bufstore.pxd) holds every eighth entry's score rounded down to a
  float, -inf past the last entry; every writer of entries refreshes it from the first entry it
  changed (``guide_from``).  Admissions only start there after checking the entry, so a stale
  guide could cost lines, never a rank.
* Theta: ``_set_theta`` is the only writer of a subscription's threshold; during a micro-batch
  (engine.pyx) it records every subscription whose theta fell, once per batch.
"""
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort as std_sort
from libc.string cimport memcpy, memset
from libc.math cimport INFINITY, nextafterf
from libc.stdlib cimport free, abort
from posix.stdlib cimport posix_memalign
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from skype._core.arena cimport NO_SLOT, NO_OWNER, HUGE_BYTES

cdef extern from *:
    """
    #include <sys/mman.h>
    static inline void skype_advise_huge_records(void* p, size_t n) {
    #ifdef MADV_HUGEPAGE
        madvise(p, n, MADV_HUGEPAGE);
    #endif
    }
    """
    void advise_huge "skype_advise_huge_records"(void* p, size_t n) noexcept nogil


cdef class BufferStore:
    # ------------------------------------------------------------------ storage
    def __dealloc__(self):
        free(self.buf)

    cdef void ensure(self, sid_t sid) noexcept nogil:
        """Records up to sid exist (new ones zeroed: no slot, empty).  Records move when the
        array grows, as a vector's do."""
        cdef size_t cap
        cdef void* grown = NULL
        if sid < self.buf_n:
            return
        if sid >= self.buf_cap:
            cap = 2 * self.buf_cap if 2 * self.buf_cap > sid + 1 else sid + 1
            if cap < 64:
                cap = 64
            # records of 2 MB and more: aligned and advised as transparent huge pages (an
            # admission or expiry visit reads a random record: one TLB miss each on 4 KB pages)
            if posix_memalign(&grown, HUGE_BYTES if cap * sizeof(SubBufC) >= HUGE_BYTES else 64,
                              cap * sizeof(SubBufC)) != 0:
                abort()                         # out of memory inside nogil code
            if cap * sizeof(SubBufC) >= HUGE_BYTES:
                advise_huge(grown, cap * sizeof(SubBufC))
            if self.buf_n:
                memcpy(grown, self.buf, self.buf_n * sizeof(SubBufC))
            free(self.buf)
            self.buf = <SubBufC*>grown
            self.buf_cap = cap
        memset(&self.buf[self.buf_n], 0, (sid + 1 - self.buf_n) * sizeof(SubBufC))
        self.buf_n = sid + 1

    cdef BufEntryC* _room(self, SubBufC* sb, size_t n) noexcept nogil:
        """The buffer's entries, in a slot that holds at least n (moved to the smallest class
        that does, when its own is too small: classes are a quarter apart, so moves are rare)."""
        cdef BufEntryC* old = self._entries(sb)
        cdef SlotC slot
        cdef BufEntryC* moved
        if sb.slot.cls != NO_SLOT and self.arena.cap[sb.slot.cls] >= n:
            return old
        slot = self.arena.take(self.arena.class_for(n), self._owner(sb))
        moved = slot_entries(self.arena, slot)
        if sb.size:
            memcpy(moved, old, sb.size * sizeof(BufEntryC))
        self._give(sb.slot)
        sb.slot = slot
        return moved

    cdef void _store(self, SubBufC* sb, const BufEntryC* src, size_t n) noexcept nogil:
        """Replace the entries by src[0:n], in the smallest class that holds one more."""
        cdef uint16_t cls = self.arena.class_for(n + 1)
        if sb.slot.cls != cls:
            self._give(sb.slot)
            sb.slot = self.arena.take(cls, self._owner(sb))
        if n:
            memcpy(self._entries(sb), src, n * sizeof(BufEntryC))
        sb.size = <uint32_t>n
        self.guide_from(sb, 0)

    cdef void _shrink(self, SubBufC* sb) noexcept nogil:
        """After a buffer lost entries: a loose slot (slot_loose) moves to the smallest class
        that holds one more entry."""
        cdef uint16_t cls
        cdef SlotC slot
        if sb.slot.cls == NO_SLOT or not slot_loose(self.arena.cap[sb.slot.cls], sb.size):
            return
        cls = self.arena.class_for(sb.size + 1)
        if cls == sb.slot.cls:
            return
        slot = self.arena.take(cls, self._owner(sb))
        if sb.size:
            memcpy(slot_entries(self.arena, slot), self._entries(sb), sb.size * sizeof(BufEntryC))
        self._give(sb.slot)
        sb.slot = slot

    cdef void guide_from(self, SubBufC* sb, size_t first) noexcept nogil:
        """Refresh the record's guide points at entries >= first (the entries before first did
        not change): each the score rounded down to a float, -inf past the last entry."""
        cdef const BufEntryC* B = self._entries(sb)
        cdef size_t j, e
        cdef float f
        for j in range(GUIDE_N):
            e = <size_t>GUIDE_STEP * (j + 1)
            if e < first:
                continue
            if e >= sb.size:
                sb.guide[j] = -INFINITY
                continue
            f = <float>B[e].score
            if <double>f > B[e].score:
                f = nextafterf(f, -INFINITY)
            sb.guide[j] = f

    cdef void _give(self, SlotC slot) noexcept nogil:
        """Give a slot back; the buffer whose slot fills the hole (arena.pyx) follows it."""
        cdef uint32_t moved = self.arena.give(slot)
        if moved != NO_OWNER:
            self.buf[moved].slot.index = slot.index

    cdef inline uint32_t _owner(self, const SubBufC* sb) noexcept nogil:
        return <uint32_t>(sb - self.buf)

    cdef void _release(self, SubBufC* sb) noexcept nogil:
        self._give(sb.slot)
        sb.slot.cls = NO_SLOT
        sb.slot.index = 0
        sb.size = 0
        self.guide_from(sb, 0)

    # ------------------------------------------------------------------ theta
    cdef void _set_theta(self, sid_t sid, double theta, bint notify) noexcept nogil:
        if self.table.hot[sid].theta == theta:
            return
        if self.batching and theta < self.table.hot[sid].theta:
            # the batch's candidates were found against the higher theta (engine.pyx)
            if self.fell_stamp.size() <= sid:
                self.fell_stamp.resize(self.table.hot.size(), 0)
            if self.fell_stamp[sid] != self.batch_stamp:
                self.fell_stamp[sid] = self.batch_stamp
                self.fell.push_back(sid)
        self.table.hot[sid].theta = theta
        if notify:
            self.index.theta_changed(sid)
        else:
            self.table.theta_idx[sid] = theta

    # ------------------------------------------------------------------ reverse map
    cdef void _drop_entry(self, sid_t sid, uint32_t seq_lo) noexcept nogil:
        """sid's entry of message seq_lo leaves its buffer while the message stays in the
        window: clear its reverse-map entry (exact holders)."""
        if self.exact_holders:
            self.drop_seq.push_back(self._full_seq(seq_lo))
            self.drop_sid.push_back(sid)
            self.n_holders_dropped += 1
            if self.drop_seq.size() >= 4096:
                self.flush_drops()

    cdef void flush_drops(self) noexcept nogil:
        """Clear the pending holder entries (``_drop_entry``), in one pass that fetches every
        message's record, then its holder block, before it scans them: the engine calls it
        after each arrival's admissions and before it reads an expiring message's holders.  A
        message gone from the window is skipped; a pending entry clears one live entry of its
        sid, so the holders stay a multiset equal to the buffers' entries whatever the order."""
        cdef size_t i, n = self.drop_seq.size()
        cdef seq_t oldest = self.window.oldest_seq
        cdef const MsgC* m
        for i in range(n):
            if self.drop_seq[i] >= oldest:
                prefetch(win_get(self.window, self.drop_seq[i]))
        for i in range(n):
            if self.drop_seq[i] >= oldest:
                m = win_get(self.window, self.drop_seq[i])
                prefetch(&self.window.hold_ring[m.hold_pos & (self.window.hold_cap - 1)])
        for i in range(n):
            if self.drop_seq[i] >= oldest:
                self.window.drop_holder_of(self.drop_seq[i], self.drop_sid[i])
        self.drop_seq.clear()
        self.drop_sid.clear()

    cdef void _remember_holds(self, const SubBufC* sb) noexcept nogil:
        """Before a rebuild: the message of every entry, for _hand_over_holds."""
        cdef const BufEntryC* B = self._entries(sb)
        cdef size_t i
        self.old_keys.clear()
        for i in range(sb.size):
            self.old_keys.push_back(B[i].seq_lo)

    cdef void _hand_over_holds(self, sid_t sid) noexcept nogil:
        """After a rebuild: register the messages that are new to this buffer, keep the handles
        of those it keeps, drop the holder entries of those it lost."""
        cdef SubBufC* sb = &self.buf[sid]
        cdef const BufEntryC* B = self._entries(sb)
        cdef size_t i, j
        std_sort(self.old_keys.begin(), self.old_keys.end())
        self.old_kept.assign(self.old_keys.size(), 0)
        if not self.track_holders:
            return
        for i in range(sb.size):
            j = self._find_key(B[i].seq_lo)
            if j < self.old_keys.size():
                self.old_kept[j] = 1
            else:
                self.window.add_holder(self._full_seq(B[i].seq_lo), sid)
        if self.exact_holders:
            for j in range(self.old_keys.size()):
                if not self.old_kept[j]:
                    self._drop_entry(sid, self.old_keys[j])

    cdef size_t _find_key(self, uint32_t seq_lo) noexcept nogil:
        """The index of seq_lo's entry in the sorted old_keys (old_keys.size() if none)."""
        cdef size_t lo = 0, hi = self.old_keys.size(), mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.old_keys[mid] < seq_lo:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.old_keys.size() and self.old_keys[lo] == seq_lo:
            return lo
        return self.old_keys.size()

    # ------------------------------------------------------------------ events
    cdef void _note_gone(self, seq_t seq) noexcept nogil:
        """seq (still in the window) is expiring and an event names it: keep its external id."""
        if self.gone_seq.size() and self.gone_seq.back() == seq:
            return
        self.gone_seq.push_back(seq)
        self.gone_ext.push_back(win_get(self.window, seq).ext_id)

    cdef void resolve_events(self) noexcept nogil:
        """Replace every event's message seq by the message's external id (at the flush)."""
        cdef size_t i, j, n = self.events.size(), ng = self.gone_seq.size()
        cdef seq_t s, oldest = self.window.oldest_seq
        for i in range(n):
            s = <seq_t>self.events[i].msg
            if s >= oldest:
                prefetch(win_get(self.window, s))
        for i in range(n):
            s = <seq_t>self.events[i].msg
            if s >= oldest:
                self.events[i].msg = win_get(self.window, s).ext_id
            else:
                j = 0
                while j + 1 < ng and self.gone_seq[j] != s:
                    j += 1
                self.events[i].msg = self.gone_ext[j]
        self.gone_seq.clear()
        self.gone_ext.clear()

    # ------------------------------------------------------------------ reading
    cdef void topk_into(self, sid_t sid, vector[int64_t]* ids, vector[double]* scores) noexcept nogil:
        """Append the top-k of ``sid`` (ids and scores, ranking order)."""
        cdef const SubBufC* sb = &self.buf[sid]
        cdef const BufEntryC* B = self._entries(sb)
        cdef int32_t k = sb.k
        cdef size_t n = sb.size if <int32_t>sb.size < k else k, i
        for i in range(n):
            ids.push_back(self._ext(B[i].seq_lo))
            scores.push_back(B[i].score)

    def topk(self, sid_t sid):
        import numpy as np
        cdef const SubBufC* sb = &self.buf[sid]
        cdef const BufEntryC* B = self._entries(sb)
        cdef int32_t k = sb.k
        cdef size_t n = sb.size if <int32_t>sb.size < k else k, i
        ids = np.empty(n, dtype=np.int64)
        scores = np.empty(n, dtype=np.float64)
        for i in range(n):
            ids[i] = self._ext(B[i].seq_lo)
            scores[i] = B[i].score
        return ids, scores

    def sizes(self):
        """(buffer size, complete flag) of every live subscription, by slot."""
        import numpy as np
        cdef size_t sid
        live = [sid for sid in range(self.buf_n) if sid < self.table.hot.size() and self.table.hot[sid].alive]
        return (np.array([self.buf[sid].size for sid in live], dtype=np.int64),
                np.array([self.buf[sid].complete for sid in live], dtype=bool))

    # ------------------------------------------------------------------ export and import
    def export_buffers(self, const uint32_t[::1] sids):
        """The buffers of ``sids`` (Engine.export_state), with no absolute seq: each entry's
        message as its position in the window (seq - oldest seq) and each record's ``born`` as
        its age (next seq - born), so that a window holding the same messages in the same order
        takes them back (``import_buffers``).  Returns (k, complete, cq, refresh_at, p_theta,
        age, admits, retune_at, theta, entry indptr, entry positions, scores, dominance counts)."""
        import numpy as np
        cdef size_t n = sids.shape[0], i, j, ne = 0, o = 0
        cdef seq_t oldest = self.window.oldest_seq
        cdef uint32_t next_lo = <uint32_t>win_next_seq(self.window)
        cdef const SubBufC* sb
        cdef const BufEntryC* B
        for i in range(n):
            ne += self.buf[sids[i]].size
        k = np.empty(n, np.int64)
        complete = np.empty(n, np.uint8)
        cq = np.empty(n, np.float32)
        refresh_at = np.empty(n, np.uint32)
        p_theta = np.empty(n, np.float32)
        age = np.empty(n, np.uint32)
        admits = np.empty(n, np.uint32)
        retune_at = np.empty(n, np.uint32)
        theta = np.empty(n, np.float64)
        indptr = np.zeros(n + 1, np.int64)
        pos = np.empty(ne, np.uint32)
        score = np.empty(ne, np.float64)
        dc = np.empty(ne, np.uint16)
        cdef int64_t[::1] k_v = k, p_v = indptr
        cdef uint8_t[::1] c_v = complete
        cdef float[::1] cq_v = cq, pt_v = p_theta
        cdef uint32_t[::1] r_v = refresh_at, age_v = age, ad_v = admits, rt_v = retune_at, pos_v = pos
        cdef double[::1] th_v = theta, sc_v = score
        cdef uint16_t[::1] dc_v = dc
        with nogil:
            for i in range(n):
                sb = &self.buf[sids[i]]
                B = self._entries(sb)
                k_v[i] = sb.k
                c_v[i] = sb.complete
                cq_v[i] = sb.cq
                r_v[i] = sb.refresh_at
                pt_v[i] = sb.p_theta
                age_v[i] = next_lo - sb.born
                ad_v[i] = sb.admits
                rt_v[i] = sb.retune_at
                th_v[i] = self.table.hot[sids[i]].theta
                for j in range(sb.size):
                    pos_v[o] = <uint32_t>(self._full_seq(B[j].seq_lo) - oldest)
                    sc_v[o] = B[j].score
                    dc_v[o] = B[j].dc
                    o += 1
                p_v[i + 1] = <int64_t>o
        return k, complete, cq, refresh_at, p_theta, age, admits, retune_at, theta, indptr, pos, score, dc

    def import_buffers(self, const uint32_t[::1] sids, const int64_t[::1] k, const uint8_t[::1] complete,
                       const float[::1] cq, const uint32_t[::1] refresh_at, const float[::1] p_theta,
                       const uint32_t[::1] age, const uint32_t[::1] admits, const uint32_t[::1] retune_at,
                       const double[::1] theta, const int64_t[::1] indptr, const uint32_t[::1] pos,
                       const double[::1] score, const uint16_t[::1] dc):
        """Give the new subscriptions ``sids`` (registered in the table, not yet in the index)
        the buffers ``export_buffers`` wrote, over a window that holds the same messages in
        the same order: each entry in the window's reverse map (a holder, as a rebuild adds
        it), each threshold set as registration sets it.  The caller validated the arrays
        (``entries_fit`` and skype.engine_state.checked_state)."""
        cdef size_t n = sids.shape[0], i, j, m
        cdef seq_t oldest = self.window.oldest_seq, seq
        cdef uint32_t next_lo = <uint32_t>win_next_seq(self.window)
        cdef SubBufC* sb
        cdef BufEntryC* B
        cdef sid_t sid
        with nogil:
            for i in range(n):
                sid = sids[i]
                self.ensure(sid)
                sb = &self.buf[sid]
                if sb.slot.cls != NO_SLOT:
                    self._release(sb)
                m = <size_t>(indptr[i + 1] - indptr[i])
                sb.slot = self.arena.take(self.arena.class_for(m + 1), sid)
                B = self._entries(sb)
                for j in range(m):
                    seq = oldest + <seq_t>pos[indptr[i] + j]
                    B[j].score = score[indptr[i] + j]
                    B[j].seq_lo = <uint32_t>seq
                    B[j].dc = dc[indptr[i] + j]
                    if self.track_holders:
                        self.window.add_holder(seq, sid)
                sb.size = <uint32_t>m
                self.guide_from(sb, 0)
                sb.k = <int32_t>k[i]
                sb.complete = complete[i]
                sb.cq = cq[i]
                sb.refresh_at = refresh_at[i]
                sb.p_theta = p_theta[i]
                sb.born = next_lo - age[i]
                sb.admits = admits[i]
                sb.retune_at = retune_at[i]
                self._set_theta(sid, theta[i], False)

    def reverse_map_mismatches(self):
        """For tests (exact holders): the (message, sid) pairs on which the reverse map and the
        buffers disagree, as a count: every window message's live holder entries (its FIFO block
        and extra list) must be exactly the buffers holding it, each once; the messages below
        ``found_upto`` keep none (window.pyx) and are skipped."""
        cdef vector[uint64_t] held, listed
        cdef size_t sid, i, j, n
        cdef seq_t seq
        cdef const BufEntryC* B
        cdef const MsgC* m
        cdef vector[sid_t] extra
        cdef uint64_t pos
        self.flush_drops()
        for sid in range(self.buf_n):
            B = self._entries(&self.buf[sid])
            for i in range(self.buf[sid].size):
                if self._full_seq(B[i].seq_lo) < self.window.found_upto:
                    continue                # no holders kept: found at its expiry (window.pyx)
                held.push_back((<uint64_t>(self._full_seq(B[i].seq_lo) - self.window.oldest_seq) << 32) | sid)
        for seq in range(self.window.oldest_seq, win_next_seq(self.window)):
            m = win_get(self.window, seq)
            for pos in range(m.hold_pos, m.hold_pos + m.hold_n):
                if win_holder_at(self.window, pos) != NO_HOLDER:
                    listed.push_back((<uint64_t>(seq - self.window.oldest_seq) << 32) | win_holder_at(self.window, pos))
            extra.clear()
            win_extra_collect(self.window, seq, &extra)
            for j in range(extra.size()):
                listed.push_back((<uint64_t>(seq - self.window.oldest_seq) << 32) | extra[j])
        std_sort(held.begin(), held.end())
        std_sort(listed.begin(), listed.end())
        i = j = n = 0
        while i < held.size() or j < listed.size():
            if j == listed.size() or (i < held.size() and held[i] < listed[j]):
                i += 1
                n += 1
            elif i == held.size() or listed[j] < held[i]:
                j += 1
                n += 1
            else:
                i += 1
                j += 1
        return n

    def memory_bytes(self):
        return self.buf_cap * sizeof(SubBufC) + self.arena.memory_bytes()


def entries_fit(const int64_t[::1] indptr, const uint32_t[::1] pos, const double[::1] score, uint64_t window_n):
    """import_buffers' entry checks, one pass without the GIL: every entry's message inside a
    window of window_n, every score finite, each buffer in ranking order (score descending,
    the newer message first among equal scores).  Returns -1, or the first buffer that fails."""
    cdef Py_ssize_t i, n = indptr.shape[0] - 1
    cdef int64_t j
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(n):
            for j in range(indptr[i], indptr[i + 1]):
                if pos[j] >= window_n or not (score[j] - score[j] == 0.0):  # NaN and infinities fail
                    bad = i
                    break
                if j > indptr[i] and (score[j] > score[j - 1] or (score[j] == score[j - 1] and pos[j] >= pos[j - 1])):
                    bad = i
                    break
            if bad >= 0:
                break
    return bad
