# Result buffers: exact top-k, cost-based k-skyband (cSkyband), Skyband (Mouratidis), kmax.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport sid_t, seq_t, ext_id_t, prefetch
from skype._core.arena cimport BufEntryC, SlotC, EntryArena, slot_entries, NO_SLOT
from skype._core.window cimport WindowStore
from skype._core.ranking cimport WindowRanking
from skype._core.subindex cimport SubTable, SubscriptionIndex
from skype._core.costmodel cimport CostModelC, BARRIER_STATIONARY, BARRIER_WINDOW, BARRIER_FACTOR, threshold_cost


cdef struct EventC:              # a top-k change: msg entered (+1) or left (-1) sid's top-k
    sid_t sid
    int32_t delta
    ext_id_t msg


cdef packed struct RankedC:       # a (score, message) pair of a bulk-registration run (12 bytes)
    double score
    uint32_t seq_lo


cdef struct PulledC:             # a message pulled from the message index in ranking order
    seq_t seq
    double score


cdef struct SubBufC:              # one subscription's result buffer (44 bytes)
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


cdef enum BufferKind:
    BUF_EXACT = 0
    BUF_CSKYBAND = 1
    BUF_SKYBAND = 2
    BUF_KMAX = 3


cdef class Buffers:
    cdef int kind
    cdef SubTable table
    cdef SubscriptionIndex index
    cdef WindowRanking msgs
    cdef WindowStore window
    cdef vector[SubBufC] buf                 # per sid
    cdef EntryArena arena                    # every buffer's entries
    # parameters
    cdef double skyband_ratio
    cdef int32_t kmax
    cdef double query_cost
    cdef int32_t stop_after                  # delta: consecutive cost increases that stop the scan
    cdef int32_t nmax_factor                 # scan at most nmax_factor * k messages
    cdef double refresh_factor               # re-evaluate a complete buffer past refresh_factor * k
    # cSkyband's cost model (costmodel.pxd): its costs, barrier and window estimates (count
    # windows: N fixed, arrivals and expiries 1/2 each)
    cdef CostModelC model
    cdef bint count_window                   # False: a time window (N and the rates are estimated)
    # events of the current operation
    cdef vector[EventC] events
    # counters
    cdef uint64_t n_reevaluations, n_refreshes, n_initializations, n_admits, reeval_work, n_queries
    cdef double cq_mean
    # scratch
    cdef bint plan_constrained                # the last cost scan wanted fewer than k messages
    cdef vector[PulledC] pulled
    cdef vector[BufEntryC] rebuilt
    cdef vector[uint32_t] old_seqs, new_seqs, old_all
    cdef vector[seq_t] heap
    # bulk registration (bulk.pyx): _pull reads a prepared ranking-order run instead of the
    # message index; past its end, a truncated run restarts the message index and skips it
    cdef const RankedC* src
    cdef size_t src_n, src_pos
    cdef bint src_truncated, src_fell_back
    cdef sid_t src_sid
    cdef uint64_t n_bulk_inits, n_bulk_fallbacks
    cdef size_t last_scan                    # messages the last scan pulled
    cdef bint track_holders                  # register holders in the window's reverse map
    cdef bint exact_holders                  # ... and drop them when the message leaves the buffer
    cdef uint64_t n_admits_topk, n_holders_dropped
    cdef bint timed                          # time re-evaluations (engine.set_timers)
    cdef double reeval_ns
    cdef vector[uint64_t] old_keys           # re-evaluation scratch: (seq_lo << 32 | hold) of the old entries
    cdef vector[uint8_t] old_kept
    cdef int32_t bulk_factor                 # skyband kinds: bulk runs hold bulk_factor * k (+ ties)
    # micro-batching (engine.pyx): subscriptions whose theta fell during the current batch
    cdef bint batching
    cdef uint32_t batch_stamp
    cdef vector[uint32_t] fell_stamp         # per sid: the batch_stamp of its last fall
    cdef vector[sid_t] fell

    cdef void ensure(self, sid_t sid) noexcept nogil
    cdef BufEntryC* _entries(self, const SubBufC* sb) noexcept nogil
    cdef BufEntryC* _room(self, SubBufC* sb, size_t n) noexcept nogil
    cdef void _store(self, SubBufC* sb, const BufEntryC* src, size_t n) noexcept nogil
    cdef void _release(self, SubBufC* sb) noexcept nogil
    cdef void init_sub(self, sid_t sid) noexcept nogil
    cdef void _init_state(self, sid_t sid) noexcept nogil
    cdef void drop_sub(self, sid_t sid) noexcept nogil
    cdef void admit(self, sid_t sid, seq_t seq, double score) noexcept nogil
    cdef bint expire(self, sid_t sid, seq_t seq) noexcept nogil
    cdef void topk_into(self, sid_t sid, vector[int64_t]* ids, vector[double]* scores) noexcept nogil
    cdef seq_t _full_seq(self, uint32_t lo) noexcept nogil
    cdef ext_id_t _ext(self, uint32_t lo) noexcept nogil
    cdef void _event(self, sid_t sid, int32_t delta, uint32_t lo) noexcept nogil
    cdef void _set_theta(self, sid_t sid, double theta, bint notify) noexcept nogil
    cdef int32_t _cap(self, int32_t k) noexcept nogil
    cdef void _update_theta(self, sid_t sid) noexcept nogil
    cdef bint _next(self, seq_t* seq, double* score) noexcept nogil
    cdef void init_sub_from(self, sid_t sid, const RankedC* run, size_t n, bint truncated) noexcept nogil
    cdef bint _pull(self, sid_t sid, double* theta) noexcept nogil
    cdef void _reevaluate(self, sid_t sid, bint emit, bint notify) noexcept nogil
    cdef void _rebuild(self, sid_t sid, bint emit, bint notify) noexcept nogil
    cdef void _drop_entry(self, const BufEntryC* e) noexcept nogil
    cdef bint _contains(self, vector[uint32_t]* sorted_vals, uint32_t v) noexcept nogil
    cdef size_t _find_key(self, uint32_t seq_lo) noexcept nogil
    cdef void _diff_events(self, sid_t sid, int32_t k) noexcept nogil


cdef inline void prefetch_buffer(Buffers b, sid_t sid) noexcept nogil:
    """Fetch a buffer's entries ahead of an admission (its binary search and dominance pass read
    up to all of them): at most 16 lines.  The SubBufC record must be fetched earlier."""
    cdef const SubBufC* sb = &b.buf[sid]
    cdef const char* p = <const char*>slot_entries(b.arena, sb.slot)
    cdef size_t nbytes = sb.size * sizeof(BufEntryC), o = 0
    if nbytes > 1024:
        nbytes = 1024
    while o < nbytes:
        prefetch(p + o)
        o += 64
