# The block index's posting lists (alpha-bands of fixed-size blocks with bound headers) and
# their upkeep; see blocklayout.pyx for the layout and invariants, blockindex.pyx for dissemination.
from libcpp.vector cimport vector
from libc.stdint cimport uint16_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t
from skype._core.subindex cimport SubscriptionIndex
from skype._core.blocks cimport BlockEntryC, BlockHeadC, BandC, TermListC


cdef class BlockLayout(SubscriptionIndex):
    cdef uint32_t block_size
    cdef int nbands
    cdef int spatial_from_band     # bands from here on sort spatially (Z-order); lower ones by theta
    cdef bint rule_band, rule_block, rule_entry
    cdef bint column_test          # the entry rule runs over the column mirror first
    cdef double theta_refresh
    cdef double slack              # rounding allowance of every f32 bound
    cdef double max_dist2          # MaxDist^2
    cdef vector[TermListC] lists   # term id -> its posting list
    cdef vector[uint32_t] loc_off  # sid -> first of its locators
    cdef vector[uint32_t] loc      # locator per (sid, term position): index in its band
    cdef vector[uint16_t] loc_n    # sid -> its number of locators (0: not indexed)
    cdef uint64_t loc_waste
    cdef uint64_t postings
    cdef uint64_t rebuilds

    cdef int _band_of(self, double alpha) noexcept nogil
    cdef BandC* _band(self, term_t t, int g) noexcept nogil
    cdef void _append(self, sid_t sid, int pos) noexcept nogil
    cdef void _mirror_push(self, BandC* band, const BlockEntryC* e) noexcept nogil
    cdef void _fill_entry(self, BlockEntryC* e, sid_t sid, int pos) noexcept nogil
    cdef void _head_add(self, BlockHeadC* h, const BlockEntryC* e) noexcept nogil
    cdef void _recompute_block(self, BandC* band, size_t b) noexcept nogil
    cdef void _rebuild(self, BandC* band, int g) noexcept nogil
    cdef void _maybe_rebuild(self, BandC* band, int g) noexcept nogil
    cdef void _locate(self, sid_t sid) noexcept nogil
    cdef void _compact_locators(self) noexcept nogil
    cdef uint32_t _zkey(self, float x, float y) noexcept nogil
