# CIQ baseline index (Chen et al., ICDE 2015, as Skype's paper adapts it; spec §4.5).
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, RectC
from skype._core.subindex cimport SubscriptionIndex


cdef struct CEntryC:             # one subscription in a (cell, term) list, 12 bytes
    sid_t sid
    float min_t                  # MinT(s, cell) rounded down: TSim below it cannot reach theta
    float ws                     # the subscription's weight for the list's term, rounded up


cdef struct CellRefC:            # a cover cell of a subscription
    uint64_t key                 # depth and Morton code of the cell
    float min_t


ctypedef vector[CEntryC]* CListPtr


cdef class CIQIndex(SubscriptionIndex):
    cdef int max_depth
    cdef int budget                            # cover cells per subscription
    cdef double theta_refresh
    cdef unordered_map[uint64_t, uint32_t] cell_ids    # cell key -> cell id
    cdef vector[uint64_t] cell_keys
    cdef unordered_map[uint64_t, vector[CEntryC]] lists  # (term << 32 | cell id) -> entries by sid
    cdef vector[vector[CellRefC]] covers       # per sid: its cover
    cdef uint64_t entry_count
    # scratch
    cdef vector[CListPtr] cursors_list
    cdef vector[size_t] cursors_pos
    cdef vector[double] cursors_w
    cdef void _cell_rect(self, uint64_t key, RectC* r) noexcept nogil
    cdef uint64_t _child(self, uint64_t key, int q) noexcept nogil
    cdef double _reach(self, sid_t sid) noexcept nogil
    cdef float _min_t(self, sid_t sid, double dmin) noexcept nogil
    cdef void _build_cover(self, sid_t sid, vector[CellRefC]* cover) noexcept nogil
    cdef uint32_t _cell_id(self, uint64_t key) noexcept nogil
    cdef void _insert_lists(self, sid_t sid) noexcept nogil
    cdef void _remove_lists(self, sid_t sid) noexcept nogil
