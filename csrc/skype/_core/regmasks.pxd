# Entry masks of registration by search: Bloom filters of a message's terms, and their bit slices (regmasks.pyx).
from libcpp.vector cimport vector
from libc.stdint cimport uint64_t
from skype._core.types cimport term_t


cdef struct TermBitsC:           # a term's bits in an entry's mask (term_bits)
    uint64_t lo
    uint64_t hi


cdef enum:
    MASK_HASHES = 4              # bits a term sets in a mask


cdef inline TermBitsC term_bits(term_t t) noexcept nogil:
    """A term's bits in an entry's mask, a Bloom filter of the message's terms: MASK_HASHES bits
    of 128 (7-bit fields of a mix of t).  A message's mask is the union of its terms' bits, so a
    message holding t has all of t's."""
    cdef TermBitsC b
    cdef uint64_t z
    cdef int r
    b.lo = 0
    b.hi = 0
    z = (<uint64_t>t + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull   # splitmix64's finaliser
    z = (z ^ (z >> 31)) * 0x94D049BB133111EBull
    z = z ^ (z >> 29)
    for r in range(MASK_HASHES):
        if (z >> (7 * r)) & 64:
            b.hi |= (<uint64_t>1) << ((z >> (7 * r)) & 63)
        else:
            b.lo |= (<uint64_t>1) << ((z >> (7 * r)) & 63)
    return b


cdef inline bint holds_bits(const TermBitsC* mask, const TermBitsC* b) noexcept nogil:
    """The mask has every bit of b (a message with this mask may hold the term)."""
    return (mask.lo & b.lo) == b.lo and (mask.hi & b.hi) == b.hi


cdef inline bint may_hold(const TermBitsC* mask, const TermBitsC* q_bits, int j0, int j1,
                          const TermBitsC* any) noexcept nogil:
    """A message with this mask may hold one of the query terms j0..j1-1 (``any``: the union of
    their bits): the mask has all the bits of one of them.  False: it holds none of them."""
    cdef int j
    if (mask.lo & any.lo) == 0 and (mask.hi & any.hi) == 0:
        return False
    for j in range(j0, j1):
        if holds_bits(mask, &q_bits[j]):
            return True
    return False


cdef int bit_positions(TermBitsC b, int* out) noexcept nogil
cdef void slice_list(const TermBitsC* masks, uint64_t n, uint64_t* rows) noexcept nogil
cdef void scan_slices(const uint64_t* rows, uint64_t n, uint64_t first, const int* q_pos, int j0, int j1,
                      vector[uint64_t]* out) noexcept nogil
