# Result buffers' storage and reverse map (bufstore.pyx): the per-subscription records, their
# entries in the arena, the reverse map's upkeep, the top-k events and theta publication.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport sid_t, seq_t, ext_id_t, prefetch
from skype._core.arena cimport BufEntryC, SlotC, EntryArena, slot_entries
from skype._core.window cimport MsgC, WindowStore, win_next_seq, win_get, win_holder_at, win_extra_collect, NO_HOLDER
from skype._core.subindex cimport SubTable, SubscriptionIndex


cdef struct EventC:              # a top-k change: msg entered (+1) or left (-1) sid's top-k
    sid_t sid
    int32_t delta
    ext_id_t msg                  # the message's window seq until resolve_events, then its external id


cdef enum:
    GUIDE_N = 5                   # guide points a record holds (20 of its spare bytes)
    GUIDE_STEP = 8                # entries between two guide points


# One subscription's result buffer: 64 bytes, one cache line (buf is 64-byte aligned); its 41
# bytes of fields at 44 bytes a record straddled two lines in 10 records of 16.
cdef struct SubBufC:
    SlotC slot                    # its entries in the arena, sorted by (score desc, seq desc):
    uint32_t size                 # the top-k is the first k of the size held
    int32_t k
    float cq                      # running mean of its re-evaluation work (cost model's C_q)
    uint32_t refresh_at           # a complete buffer is re-evaluated beyond this many entries
    float p_theta                 # planned admission probability per arrival (n_theta / |W|)
    uint32_t born                 # arrival counter (low 32 bits) at the last re-evaluation
    uint32_t admits               # admissions since the last re-evaluation
    uint32_t retune_at            # window size at which a plan made on a filling window is redone
    # complete = 1: holds every match (skyband kinds: the k-skyband of every match), so
    # theta = 0 and expiry never re-evaluates
    uint8_t complete
    uint8_t spare[3]
    # the admission's guide (guide_from): entry GUIDE_STEP * (j + 1)'s score rounded down to a
    # float (-inf past the last entry), so that an admission finds its insertion line from the
    # record alone; the entries stay the truth (admit checks the line before it)
    float guide[GUIDE_N]


cdef inline size_t guide_start(const SubBufC* sb, double score) noexcept nogil:
    """The first entry whose line an admission of ``score`` must read: every entry before the
    last guide point that scores above ``score`` ranks before it, so the insertion lies after
    that point (its entry is returned: admit reads it to check the guide)."""
    cdef size_t j = GUIDE_N
    while j > 0 and not (sb.guide[j - 1] > score):
        j -= 1
    return <size_t>j * GUIDE_STEP


cdef inline bint slot_loose(uint32_t cap, uint32_t size) noexcept nogil:
    """_shrink's rule: a slot of cap entries is loose for a buffer of size entries when it is at
    least 1.5 times what the buffer needs (size + 1); the hysteresis keeps a buffer that hovers
    around a class boundary from moving back and forth."""
    return 2 * <uint64_t>cap >= 3 * (<uint64_t>size + 1)


cdef class BufferStore:
    cdef SubTable table
    cdef SubscriptionIndex index
    cdef WindowStore window
    cdef SubBufC* buf                        # per sid, buf_n records, 64-byte aligned (ensure)
    cdef size_t buf_n, buf_cap
    cdef EntryArena arena                    # every buffer's entries
    cdef vector[EventC] events               # events of the current operation
    cdef vector[seq_t] gone_seq              # messages that left the window during it, with
    cdef vector[ext_id_t] gone_ext           # their external ids (resolve_events)
    cdef bint track_holders                  # register holders in the window's reverse map
    cdef bint exact_holders                  # ... and drop them when the message leaves the buffer
    cdef uint64_t n_holders_dropped
    # holder entries to clear (exact holders), cleared in one prefetched pass (flush_drops)
    cdef vector[seq_t] drop_seq
    cdef vector[sid_t] drop_sid
    cdef vector[uint32_t] old_keys           # handoff scratch: seq_lo of the old entries, sorted
    cdef vector[uint8_t] old_kept
    # micro-batching (engine.pyx): subscriptions whose theta fell during the current batch
    cdef bint batching
    cdef uint32_t batch_stamp
    cdef vector[uint32_t] fell_stamp         # per sid: the batch_stamp of its last fall
    cdef vector[sid_t] fell

    cdef void ensure(self, sid_t sid) noexcept nogil
    cdef BufEntryC* _room(self, SubBufC* sb, size_t n) noexcept nogil
    cdef void _store(self, SubBufC* sb, const BufEntryC* src, size_t n) noexcept nogil
    cdef void _release(self, SubBufC* sb) noexcept nogil
    cdef void _give(self, SlotC slot) noexcept nogil
    cdef void _shrink(self, SubBufC* sb) noexcept nogil
    cdef void guide_from(self, SubBufC* sb, size_t first) noexcept nogil
    cdef uint32_t _owner(self, const SubBufC* sb) noexcept nogil
    cdef void _set_theta(self, sid_t sid, double theta, bint notify) noexcept nogil
    cdef void _drop_entry(self, sid_t sid, uint32_t seq_lo) noexcept nogil
    cdef void flush_drops(self) noexcept nogil
    cdef void _remember_holds(self, const SubBufC* sb) noexcept nogil
    cdef void _hand_over_holds(self, sid_t sid) noexcept nogil
    cdef size_t _find_key(self, uint32_t seq_lo) noexcept nogil
    cdef void resolve_events(self) noexcept nogil
    cdef void _note_gone(self, seq_t seq) noexcept nogil
    cdef void topk_into(self, sid_t sid, vector[int64_t]* ids, vector[double]* scores) noexcept nogil

    # hot helpers, inlined into their callers (buffers.pyx, reevaluation.pyx, engine.pyx)
    cdef inline BufEntryC* _entries(self, const SubBufC* sb) noexcept nogil:
        return slot_entries(self.arena, sb.slot)

    cdef inline seq_t _full_seq(self, uint32_t lo) noexcept nogil:
        cdef seq_t newest = win_next_seq(self.window) - 1
        return newest - <uint32_t>(<uint32_t>newest - lo)

    cdef inline ext_id_t _ext(self, uint32_t lo) noexcept nogil:
        return win_get(self.window, self._full_seq(lo)).ext_id

    cdef inline void _event(self, sid_t sid, int32_t delta, uint32_t lo) noexcept nogil:
        # the message's seq: its external id (a random window record) is read at the flush
        cdef EventC e
        e.sid = sid
        e.delta = delta
        e.msg = <ext_id_t>self._full_seq(lo)
        self.events.push_back(e)
