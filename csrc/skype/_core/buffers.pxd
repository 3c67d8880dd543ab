# Result buffers (buffers.pyx): admission, expiry and floors per kind (exact top-k, cost-based
# k-skyband (cSkyband), Skyband (Mouratidis), kmax) over Reevaluation (reevaluation.pxd).
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint64_t
from skype._core.types cimport sid_t, seq_t, prefetch
from skype._core.arena cimport BufEntryC, slot_entries
from skype._core.bufstore cimport EventC, SubBufC, guide_start
from skype._core.reevaluation cimport Reevaluation, RankedC, PulledC
from skype._core.reevaluation cimport BUF_EXACT, BUF_CSKYBAND, BUF_SKYBAND, BUF_KMAX


cdef class Buffers(Reevaluation):
    # counters
    cdef uint64_t n_reevaluations, n_refreshes, n_initializations, n_admits, n_bulk_inits
    cdef uint64_t n_admits_topk
    # floors (set_floor): empty until the first floor is set, so admit tests one size when unused
    cdef vector[double] floor_of             # per sid: an admission scoring below it may be skipped
    cdef vector[double] skipped_of           # per sid: the best score skipped since the last rebuild
    cdef uint64_t n_floor_skips, n_floor_repairs
    # the side list of skipped messages (skyband kinds): a lowered floor re-admits them instead of
    # a rebuild, unless one scoring at or above it was dropped (dropped_of: the list overflowed)
    cdef vector[vector[PulledC]] skipped_list
    cdef vector[double] dropped_of           # per sid: the best score the full side list dropped
    cdef int32_t skipped_cap                 # side list length per subscription (0: rebuild always)
    cdef uint64_t n_floor_readmits, n_floor_readmitted, floor_readmit_work, n_floor_refills
    # the admission's work (stats()["admission_work"]): entries from where its search starts to
    # the buffer's end (what its search, dominance pass and shift may read), insertion ranks,
    # buffer sizes, evictions, and guides the entries contradicted (0 unless a guide is stale)
    cdef bint guided                         # admissions start at the record's guide (bufstore.pxd)
    # the engine's prefetch distances for admissions and expiry visits (engine.pyx): buffer
    # records this many buffers ahead, their entries ahead_entries
    cdef size_t ahead_records, ahead_entries
    cdef uint64_t n_admit_span, n_admit_pos, n_admit_size, n_admit_evicted, n_guide_misses

    cdef void init_sub(self, sid_t sid) noexcept nogil
    cdef void init_sub_from(self, sid_t sid, const RankedC* run, size_t n, bint truncated) noexcept nogil
    cdef void _init_state(self, sid_t sid) noexcept nogil
    cdef void drop_sub(self, sid_t sid) noexcept nogil
    cdef void _rebuild(self, sid_t sid, bint emit, bint notify) noexcept nogil
    cdef void admit(self, sid_t sid, seq_t seq, double score) noexcept nogil
    cdef bint expire(self, sid_t sid, seq_t seq) noexcept nogil
    cdef void _update_theta(self, sid_t sid) noexcept nogil
    cdef void set_floor(self, sid_t sid, double floor) noexcept nogil
    cdef void _list_skipped(self, sid_t sid, seq_t seq, double score) noexcept nogil
    cdef void _readmit_skipped(self, sid_t sid, double floor) noexcept nogil
    cdef bint _refill_from_skipped(self, sid_t sid) noexcept nogil
    cdef void _clear_skipped(self, sid_t sid) noexcept nogil


cdef inline void prefetch_lines(const char* p, size_t nbytes) noexcept nogil:
    """Fetch the lines of [p, p + nbytes), at most 16 of them."""
    cdef size_t a = <size_t>p & ~(<size_t>63), end = <size_t>p + nbytes
    if nbytes > 1024:
        end = <size_t>p + 1024
    while a < end:
        prefetch(<const char*>a)
        a += 64


cdef inline void prefetch_admission(Buffers b, sid_t sid, double score) noexcept nogil:
    """Fetch what an admission of ``score`` into sid's buffer reads: its entries from the line of
    the record's guide point (bufstore.pxd) to the end, or all of them without the guide (at most
    16 lines).  The SubBufC record must be fetched earlier."""
    cdef const SubBufC* sb = &b.buf[sid]
    cdef const char* p = <const char*>slot_entries(b.arena, sb.slot)
    cdef size_t first = guide_start(sb, score) if b.guided else 0
    if first >= sb.size:
        first = 0
    prefetch_lines(p + first * sizeof(BufEntryC), (sb.size - first) * sizeof(BufEntryC))


cdef inline void prefetch_buffer(Buffers b, sid_t sid) noexcept nogil:
    """Fetch a buffer's entries ahead of an expiry (its search and shift read up to all of them):
    at most 16 lines.  The SubBufC record must be fetched earlier."""
    cdef const SubBufC* sb = &b.buf[sid]
    prefetch_lines(<const char*>slot_entries(b.arena, sb.slot), sb.size * sizeof(BufEntryC))
