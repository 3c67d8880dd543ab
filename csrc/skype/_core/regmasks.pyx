# cython: language_level=3
"""Entry masks of registration by search (regsearch.pyx, regtree.pyx): which window messages
may hold a term, without reading the window.

A message's mask is a Bloom filter of its terms: the union of their ``term_bits``, 128 bits,
MASK_HASHES = 4 bits a term (7-bit fields of a 64-bit mix of its id); only the batch's terms
are entered (no other term is ever tested).  A message holding t has all of t's bits (no false
negatives), so "the mask holds t's bits" (``holds_bits``) reads *may hold t*, and its negation
*holds no t*; a false match only costs a window read (at 9 batch terms a message about 0.5% of
tests; the earlier 64-bit masks, one bit a term and every term entered, matched falsely in 13%
and were removed: ``docs/results/2026-11-29-library.md``).

Bit slices.  A list of n masks stored as 128 rows of ceil(n / 64) words, row b holding bit i
for every mask i that has bit b (``slice_list``).  The masks holding all of a term's bits are
the AND of its rows, and those that may hold one of several terms the OR of those ANDs, 64
masks a word (``scan_slices``): the same test as ``may_hold`` on each mask, so a scan of the
slices and a test of each entry agree exactly.  Rows for bits a query term lacks are not read.
"""
from libcpp.vector cimport vector
from libc.stdint cimport uint64_t


cdef extern from *:
    """
    static inline int skype_ctz64(unsigned long long x) { return __builtin_ctzll(x); }
    """
    int ctz64 "skype_ctz64"(uint64_t x) noexcept nogil


cdef int bit_positions(TermBitsC b, int* out) noexcept nogil:
    """The positions (0-127) of b's bits into out[0:MASK_HASHES], -1 after the last (a term's
    hashes may coincide); returns their count."""
    cdef int r = 0, count
    cdef uint64_t bits = b.lo
    while bits and r < MASK_HASHES:
        out[r] = ctz64(bits)
        r += 1
        bits &= bits - 1
    bits = b.hi
    while bits and r < MASK_HASHES:
        out[r] = 64 + ctz64(bits)
        r += 1
        bits &= bits - 1
    count = r
    while r < MASK_HASHES:
        out[r] = -1
        r += 1
    return count


cdef void slice_list(const TermBitsC* masks, uint64_t n, uint64_t* rows) noexcept nogil:
    """Bit-slice masks[0:n] into rows (128 * ceil(n / 64) words, zeroed by the caller)."""
    cdef uint64_t words = (n + 63) >> 6, i, off, r, bits
    for i in range(n):
        off = i >> 6
        r = (<uint64_t>1) << (i & 63)
        bits = masks[i].lo
        while bits:
            rows[<uint64_t>ctz64(bits) * words + off] |= r
            bits &= bits - 1
        bits = masks[i].hi
        while bits:
            rows[(64 + <uint64_t>ctz64(bits)) * words + off] |= r
            bits &= bits - 1


cdef void scan_slices(const uint64_t* rows, uint64_t n, uint64_t first, const int* q_pos, int j0, int j1,
                      vector[uint64_t]* out) noexcept nogil:
    """Append first + i, in order, for every mask i of the sliced list (rows, n masks) that has
    all the bits of one of the query terms j0..j1-1 (their positions: q_pos[j * MASK_HASHES:])."""
    cdef uint64_t words = (n + 63) >> 6, w, acc, x
    cdef int j, r, b
    for w in range(words):
        acc = 0
        for j in range(j0, j1):
            x = ~(<uint64_t>0)
            for r in range(MASK_HASHES):
                b = q_pos[j * MASK_HASHES + r]
                if b >= 0:
                    x &= rows[<uint64_t>b * words + w]
            acc |= x
        while acc:
            out.push_back(first + w * 64 + <uint64_t>ctz64(acc))
            acc &= acc - 1
