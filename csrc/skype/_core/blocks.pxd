# Postings, block headers and the bounds over them, for the block index (blockindex.pyx): the
# structs and the inline algebra of the tests (header widening, the linear-in-alpha bound, Lemma
# 4's a/b form, the entry's a and b bounds), all noexcept nogil.  Every bound here is an upper
# bound of what it stands for, and every stored minimum a lower bound (see blockindex.pyx).
from libcpp.vector cimport vector
from libc.math cimport INFINITY
from libc.stdint cimport uint16_t, uint32_t
from skype._core.types cimport MsgTermC
from skype._core.scoring cimport round_up, round_down


cdef extern from "skype/_core/scankernel.h" nogil:
    ctypedef struct skype_scan_query:
        float fx, fy, wm, mx, margin, max_dist2
    ctypedef struct ColGroupC "skype_col_group":
        float x[8]
        float y[8]
        uint16_t w[8]              # w rounded up
        uint16_t rest[8]           # rest rounded up
        uint16_t alpha[8]          # alpha rounded to nearest
        uint16_t theta[8]          # theta rounded down; SCAN_THETA_REMOVED: removed or padding
    uint16_t SCAN_THETA_REMOVED "SKYPE_THETA_REMOVED"
    uint16_t code_w "skype_code_w"(double w)
    uint16_t code_rest "skype_code_rest"(double rest)
    uint16_t code_alpha "skype_code_alpha"(double alpha)
    uint16_t code_theta "skype_code_theta"(double theta)
    float decode_w "skype_decode_w"(uint16_t c)
    float decode_rest "skype_decode_rest"(uint16_t c)
    float decode_alpha "skype_decode_alpha"(uint16_t c)
    float decode_theta "skype_decode_theta"(uint16_t c)
    int scan_has_avx2 "skype_scan_has_avx2"()
    void scan_force "skype_scan_force"(int kernel)
    int scan_kernel "skype_scan_kernel"()
    size_t scan_block "skype_scan_block"(int kernel, const ColGroupC* groups, size_t start, size_t end,
                                         const skype_scan_query* q, uint32_t* out)


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
    # compact hot columns (column_test): the postings' f32 locations and 16-bit conservative codes
    # of their bound fields (scankernel.h), in groups of 8 (posting i: group i / 8, lane i % 8),
    # filtered a block at a time by a vector kernel
    vector[ColGroupC] cols
    vector[BlockHeadC] heads     # one header per block
    BlockHeadC head              # bounds over the whole band
    uint32_t sorted_n            # entries[0, sorted_n) are in the band's sort order
    uint32_t dead                # removed entries not yet compacted away
    uint32_t head_stale          # a block's theta_min rose: re-derive head.theta_min on the next visit
    int band_id                  # which alpha-band (the list keeps only non-empty ones, by id)


cdef struct TermListC:
    vector[BandC] bands          # the alpha-bands that have entries, ascending band_id


cdef inline double alpha_slack() noexcept nogil:
    """|alpha - (float)alpha| <= 6e-8: the allowance for alpha's f32 copy."""
    return 1e-7


cdef inline uint32_t spread16(uint32_t v) noexcept nogil:
    v &= 0xFFFF
    v = (v | (v << 8)) & 0x00FF00FF
    v = (v | (v << 4)) & 0x0F0F0F0F
    v = (v | (v << 2)) & 0x33333333
    v = (v | (v << 1)) & 0x55555555
    return v


cdef inline bint in_prefix(uint32_t t, const MsgTermC* m, int j) noexcept nogil:
    """Is term t among the message's first j terms (sorted ascending)?"""
    cdef int i
    for i in range(j):
        if m[i].term >= t:
            return m[i].term == t
    return False


cdef inline void head_clear(BlockHeadC* h) noexcept nogil:
    h.minx = INFINITY
    h.miny = INFINITY
    h.maxx = -INFINITY
    h.maxy = -INFINITY
    h.alpha_min = INFINITY
    h.alpha_max = -INFINITY
    h.theta_min = INFINITY
    h.w_max = 0.0
    h.rest_max = 0.0
    h.a_min = INFINITY
    h.b_max = 0.0


cdef inline float entry_a(const BlockEntryC* e) noexcept nogil:
    """A lower bound of a_s = theta_s / (1 - alpha_s) from the f32 copies (alpha within 1e-7);
    -inf for alpha >= 1/2, where the a/b form of the bound is not used."""
    if e.alpha >= 0.5:
        return -INFINITY
    return round_down(<double>e.theta / (1.0 - <double>e.alpha + alpha_slack()))


cdef inline float entry_b(const BlockEntryC* e) noexcept nogil:
    """An upper bound of b_s = alpha_s / (1 - alpha_s) (alpha < 1/2, so b < 1)."""
    if e.alpha >= 0.5:
        return INFINITY
    return round_up((<double>e.alpha + alpha_slack()) / (1.0 - <double>e.alpha - alpha_slack()))


cdef inline void head_merge(BlockHeadC* h, const BlockHeadC* o) noexcept nogil:
    if o.theta_min == INFINITY:
        return
    if o.minx < h.minx:
        h.minx = o.minx
    if o.miny < h.miny:
        h.miny = o.miny
    if o.maxx > h.maxx:
        h.maxx = o.maxx
    if o.maxy > h.maxy:
        h.maxy = o.maxy
    if o.alpha_min < h.alpha_min:
        h.alpha_min = o.alpha_min
    if o.alpha_max > h.alpha_max:
        h.alpha_max = o.alpha_max
    if o.theta_min < h.theta_min:
        h.theta_min = o.theta_min
    if o.w_max > h.w_max:
        h.w_max = o.w_max
    if o.rest_max > h.rest_max:
        h.rest_max = o.rest_max
    if o.a_min < h.a_min:
        h.a_min = o.a_min
    if o.b_max > h.b_max:
        h.b_max = o.b_max


cdef inline uint32_t theta_bucket(float theta) noexcept nogil:
    """Four coarse threshold classes: a block holding one subscription with theta ~ 0 (a
    complete buffer keeps every match) can never be skipped, so such postings keep together."""
    if theta < 0.05:
        return 0
    if theta < 0.4:
        return 1
    if theta < 0.7:
        return 2
    return 3


cdef inline bint below(double alpha, double tt, double d2, double theta, double max_dist2) noexcept nogil:
    """alpha * (1 - sqrt(d2) / MaxDist) + (1 - alpha) * tt < theta, without a root or a division:
    with r = alpha + (1 - alpha) * tt - theta, it holds iff r < 0 or alpha^2 d2 > r^2 MaxDist^2."""
    cdef double r = alpha + (1.0 - alpha) * tt - theta
    return r < 0.0 or alpha * alpha * d2 > r * r * max_dist2


cdef inline bint below_ab(double tt, double b, double d2, double a, double max_dist2) noexcept nogil:
    """tt + b * (1 - sqrt(d2) / MaxDist) < a, without a root or a division: with r = tt + b - a,
    it holds iff r < 0 or b^2 d2 > r^2 MaxDist^2."""
    cdef double r = tt + b - a
    return r < 0.0 or b * b * d2 > r * r * max_dist2


cdef inline bint head_covers(const BlockHeadC* h, const BlockEntryC* e) noexcept nogil:
    return (h.theta_min <= e.theta and h.w_max >= e.w and h.rest_max >= e.rest
            and h.minx <= e.x <= h.maxx and h.miny <= e.y <= h.maxy
            and h.alpha_min <= e.alpha <= h.alpha_max
            and h.a_min <= entry_a(e) and h.b_max >= entry_b(e))


cdef inline bint mirror_matches(const BandC* band, size_t i) noexcept nogil:
    cdef const BlockEntryC* e = &band.entries[i]
    cdef const ColGroupC* c = &band.cols[i >> 3]
    cdef size_t lane = i & 7
    return (c.theta[lane] == code_theta(e.theta) and c.x[lane] == e.x and c.y[lane] == e.y
            and c.alpha[lane] == code_alpha(e.alpha) and c.w[lane] == code_w(e.w)
            and c.rest[lane] == code_rest(e.rest))


cdef inline void col_set(ColGroupC* groups, size_t i, const BlockEntryC* e) noexcept nogil:
    cdef ColGroupC* c = &groups[i >> 3]
    cdef size_t lane = i & 7
    c.x[lane] = e.x
    c.y[lane] = e.y
    c.w[lane] = code_w(e.w)
    c.rest[lane] = code_rest(e.rest)
    c.alpha[lane] = code_alpha(e.alpha)
    c.theta[lane] = code_theta(e.theta)


cdef inline void col_pad(ColGroupC* c) noexcept nogil:
    """A fresh group: every lane a removed posting (never kept by the kernels)."""
    cdef int lane
    for lane in range(8):
        c.x[lane] = 0.0
        c.y[lane] = 0.0
        c.w[lane] = 0
        c.rest[lane] = 0
        c.alpha[lane] = 0
        c.theta[lane] = SCAN_THETA_REMOVED
