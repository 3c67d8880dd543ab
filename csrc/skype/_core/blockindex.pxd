# The keyword-first block index (index="blocks"): per-term posting lists in alpha-bands of
# fixed-size blocks with bound headers; see blockindex.pyx for the algorithm and invariants.
from libcpp.vector cimport vector
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, MsgTermC
from skype._core.subindex cimport SubscriptionIndex, SubTable


cdef struct BlockEntryC:         # one subscription in a (term, band) list ("fat posting", 40 bytes)
    uint32_t sid
    float x                      # location as f32 (the bounds allow for the rounding)
    float y
    float alpha
    float theta                  # lower bound of theta_s (rounded down); +inf marks a removed entry
    float w                      # w(s, t), rounded up
    float rest                   # wtsum(s, pos + 1): the weight of the terms after t, rounded up
    uint32_t other0              # s has <= 3 terms: its other terms, ascending (NO_TERM pads);
    uint32_t other1              # more: the terms at pos - 1 and pos - 2 (NO_TERM when missing)
    uint16_t pos                 # position of t in s's term list
    uint16_t nterms              # s's number of terms


cdef struct BlockHeadC:          # bounds over the live entries of one block (or a whole band)
    float minx                   # MBR of the entries' f32 locations
    float miny
    float maxx
    float maxy
    float alpha_min
    float alpha_max
    float theta_min              # +inf when no entry is live
    float w_max
    float rest_max
    float a_min                  # min of a lower bound of a_s = theta_s / (1 - alpha_s); -inf in high bands
    float b_max                  # max of an upper bound of b_s = alpha_s / (1 - alpha_s)


cdef struct BandC:               # one alpha-band of one term's posting list
    vector[BlockEntryC] entries  # block b holds entries[b * B, (b + 1) * B)
    # a column mirror of the postings' bound fields, tested branch-free a block at a time
    vector[float] col_x
    vector[float] col_y
    vector[float] col_alpha
    vector[float] col_theta      # +inf for a removed posting, as in the entry
    vector[float] col_w
    vector[float] col_rest
    vector[BlockHeadC] heads     # one header per block
    BlockHeadC head              # bounds over the whole band
    uint32_t sorted_n            # entries[0, sorted_n) are in the band's sort order
    uint32_t dead                # removed entries not yet compacted away
    uint32_t head_stale          # a block's theta_min rose: re-derive head.theta_min on the next visit
    int band_id                  # which alpha-band (the list keeps only non-empty ones, by id)


cdef struct TermListC:
    vector[BandC] bands          # the alpha-bands that have entries, ascending band_id


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
    cdef void _scan_band(self, BandC* band, const MsgTermC* m, int j, int nm, double x, double y) noexcept nogil
