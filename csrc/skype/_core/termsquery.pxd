# The continuous terms kind, a sibling of QueryCore's other kinds (design 3's blocks; design 1/2's
# buffers, bounds, bounded walks, memos).
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, RectC, MsgTermC
from skype._core.window cimport MsgC
from skype._core.querykind cimport QueryKind
from skype._core.rangeindex cimport RectSubIndex
from skype._core.termgrid cimport TermGrid, CellRangeC
from skype._core.termblocks cimport TermBlocks
from skype._core.termrank cimport term_key, key_count


cdef enum:
    MEMO = 256                     # remembered upper bounds per terms subscription (direct mapped)


cdef struct RegionSubC:            # a terms subscription (its rectangle is in `regions`)
    RectC rect
    int64_t ext_id
    uint32_t k
    uint32_t cap                   # its buffer's capacity (>= k)
    uint64_t bound                 # no term outside the buffer ranks before this key
    uint8_t alive


cdef inline pair[uint64_t, term_t] rank_key(uint32_t count, uint32_t label, term_t t) noexcept nogil:
    return pair[uint64_t, term_t](term_key(count, label), t)


cdef class TermsKind(QueryKind):
    cdef RectSubIndex regions              # terms subscriptions (no predicate)
    cdef uint32_t knn_factor               # a buffer holds knn_factor * k entries (terms: at least 2k)
    # terms subscriptions, by slot of `regions`
    cdef vector[RegionSubC] region
    cdef vector[vector[pair[uint64_t, term_t]]] region_buf  # ((UINT32_MAX - count) << 32 | label, term), ascending
    cdef uint64_t region_refills, region_walks, region_updates, region_scans, region_bounded
    cdef vector[uint8_t] in_msg            # by term: held by the message being applied
    cdef vector[uint64_t] region_memo      # by slot, MEMO ways: term << 32 | an upper bound of its count
    cdef uint64_t region_memo_hits
    cdef vector[term_t] found              # scratch: the message's terms in a buffer
    cdef vector[uint32_t] labels           # by term: order-preserving label of its name
    cdef vector[vector[term_t]] region_top     # the current top-k terms
    cdef vector[uint32_t] hits             # the subscriptions of the message being applied
    cdef uint64_t matches
    # one step's netting
    cdef vector[uint64_t] region_touch_step
    cdef vector[uint32_t] region_touched
    cdef vector[vector[term_t]] region_before
    cdef uint64_t step
    # scratch counts of a rectangle's terms (refills and snapshots)
    cdef vector[uint32_t] counts
    cdef vector[term_t] touched_terms
    # design 2: shared per-cell term counts bound outside terms before a walk (0 cells: off)
    cdef uint32_t grid_cells, grid_create_at, grid_drop_below
    cdef bint grid_on
    cdef TermGrid grid
    cdef vector[CellRangeC] region_cells   # by slot: the grid cells its rectangle meets
    cdef uint64_t region_grid_checks, region_grid_bounded
    # design 3 (set_blocks): lanes in blocks of 64 hold the terms subscriptions instead
    cdef TermBlocks blocks
    cdef bint blocks_on
    cdef void _apply(self, const MsgC* m, const MsgTermC* mt, int delta) noexcept nogil
    cdef void _terms_net(self, int64_t at) noexcept nogil

    cdef void _region_touch(self, uint32_t slot) noexcept nogil
    cdef void _terms_window(self, double x, double y, const MsgTermC* mt, uint32_t nterms, int delta) noexcept nogil
    cdef void _region_add(self, uint32_t slot, term_t t, int delta) noexcept nogil
    cdef void _region_outside(self, uint32_t slot, term_t t) noexcept nogil
    cdef void _region_message(self, uint32_t slot, const MsgTermC* mt, uint32_t nterms, int delta) noexcept nogil
    cdef void _mark_terms(self, const MsgTermC* mt, uint32_t nterms, uint8_t on) noexcept nogil
    cdef void _region_refill(self, uint32_t slot) noexcept nogil
    cdef void _region_rank(self, uint32_t slot, vector[term_t]* out) noexcept nogil
