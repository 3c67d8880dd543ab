# The core engine: window store + message index + subscription index + result buffers.
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport sid_t, seq_t, MsgTermC
from skype._core.window cimport WindowStore
from skype._core.ranking cimport WindowRanking
from skype._core.subindex cimport SubTable, SubscriptionIndex, CandC
from skype._core.buffers cimport Buffers
from skype._core.flush cimport TopkChanges


cdef class CoreEngine:
    cdef WindowStore window
    cdef WindowRanking msgs             # the message index: term lists or quadtrees
    cdef SubTable table
    cdef SubscriptionIndex index
    cdef Buffers buffers
    cdef uint64_t count_window          # N for a count window, 0 for a time window
    cdef double time_window             # T for a time window, 0 for a count window
    cdef double max_dist
    cdef double arrival_ns, expiry_ns   # time spent in arrivals / expirations
    cdef uint64_t arrivals, expirations
    cdef double recent_arrivals, recent_expirations   # decayed counts (time-window estimates)
    cdef TopkChanges changes            # the output: netted top-k changes (flush.pyx)
    cdef vector[MsgTermC] msg_terms     # the arriving message's terms as records
    cdef bint reverse_map               # False: holders found at expiry by re-dissemination
    cdef bint find_registered           # bulk registration: holders of old messages found at expiry
    cdef uint64_t expiry_candidates     # candidates verified by those re-disseminations
    cdef vector[sid_t] expiring         # the holders of the expiring message (scratch)
    cdef object index_factory           # () -> an empty index of the engine's kind (bulk registration)
    cdef size_t bulk_min                # smallest batch registered in bulk
    cdef bint bulk_adapt                # cSkyband: size the runs from the sample's scans
    cdef bint bulk_skyband              # the Skyband buffer too (off by default)
    cdef uint64_t bulk_budget           # heap entries of one bulk pass
    cdef uint64_t bulk_passes, bulk_subscriptions, bulk_offers
    cdef double bulk_ns, bulk_build_ns
    cdef dict bulk_counters             # the temporary indexes' dissemination counters
    cdef bint reg_search                # bulk registration by search (regtree.pyx), not replay
    cdef dict search_stats              # the registration indexes' counters
    cdef size_t micro_batch             # messages disseminated together (<= 1: one at a time)
    cdef vector[MsgTermC] batch_terms   # the batch's messages' terms, message i's from batch_offs[i]
    cdef vector[size_t] batch_offs
    cdef vector[double] batch_x, batch_y
    cdef uint64_t batch_rescored        # exact scores of subscriptions whose theta fell in a batch
    # instruments (stats()["phases"]): counters always, phase timers only when ``timed``
    cdef bint timed                     # per-phase clocks on (off by default: two clock reads a phase)
    cdef double enter_ns, disseminate_ns, admit_ns, flush_ns   # arrival phases (timed only)
    cdef uint64_t holder_entries        # reverse-map entries read at expiry
    cdef uint64_t holders_visited       # of them, the buffers visited (live subscription)
    cdef uint64_t holders_found         # of those, the buffers that still held the message
    cdef uint64_t flushed_events, flushed_changes   # top-k events before and after netting

    cdef void _expire_oldest(self) noexcept nogil
    cdef void _expire_from(self, sid_t sid, seq_t seq) noexcept nogil
    cdef void _expire_for(self, double t, bint arriving) noexcept nogil
    cdef void _arrive(self, int64_t ext_id, double x, double y, double t,
                      const unsigned int* terms, const double* w, int n) noexcept nogil
    cdef void _arrive_terms(self, int64_t ext_id, double x, double y, double t,
                            const MsgTermC* terms, int n) noexcept nogil
    cdef seq_t _enter(self, int64_t ext_id, double x, double y, double t,
                      const MsgTermC* terms, int n) noexcept nogil
    cdef void _admit_all(self, seq_t seq, const CandC* cands, size_t n, bint batched) noexcept nogil
    cdef void _publish_micro(self, Py_ssize_t first, Py_ssize_t end, const int64_t* ids, const double* x,
                             const double* y, const double* t, const int64_t* indptr, const uint32_t* terms,
                             const double* weights) noexcept nogil
    cdef void _flush(self, int64_t at) noexcept nogil
    cdef void _subscribe_bulk(self, vector[sid_t]& sids)
