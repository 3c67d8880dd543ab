# The keyword-first block index (index="blocks"): per-term posting lists in alpha-bands of
# fixed-size blocks with bound headers; see blockindex.pyx for the algorithm and invariants.
from libcpp.vector cimport vector
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, MsgTermC
from skype._core.subindex cimport SubscriptionIndex, SubTable
from skype._core.blocks cimport BlockEntryC, BlockHeadC, BandC, TermListC


cdef class BlockIndex(SubscriptionIndex):
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
    # per-message scratch
    cdef vector[double] m_maxwt    # m_maxwt[j] = max weight of the message's terms j..n-1
    cdef vector[sid_t] pending     # first meetings that passed every bound, to verify
    cdef vector[uint8_t] keep      # per block: postings the column test could not rule out
    # per-batch scratch (disseminate_batch)
    cdef vector[double] b_maxwt    # every message's m_maxwt, message i's from offs[i] + i
    cdef vector[uint64_t] b_keys   # (term, message, position) triples, in term order
    cdef vector[uint32_t] b_msg    # the message of each pending first meeting
    cdef vector[size_t] b_end      # per message: the end of its run in b_sorted
    cdef vector[sid_t] b_sorted    # pending first meetings, message by message

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
    cdef bint _head_prunes(self, const BlockHeadC* h, double wm, double mx, double x, double y) noexcept nogil
    cdef bint _met_before(self, const BlockEntryC* e, const MsgTermC* m, int j) noexcept nogil
    cdef double _text_after(self, const BlockEntryC* e, const MsgTermC* m, int j, int n, double mx) noexcept nogil
    cdef void _column_test(self, BandC* band, size_t start, size_t end, double wm, double mx,
                           double x, double y) noexcept nogil
    cdef void _scan_band(self, BandC* band, const MsgTermC* m, int j, int nm, double x, double y,
                         double mx) noexcept nogil
    cdef void _verify_all(self, const sid_t* sids, size_t n, const MsgTermC* m, int nm, double x,
                          double y) noexcept nogil
