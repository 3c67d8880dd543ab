# A block's map from term to row (termblocks.pyx): open addressing with linear probing over a
# power-of-two table of uint64 entries, ``term << 32 | row`` (0 is empty: core terms are >= 1), at
# most half full.  Erasing shifts the entries after it back to where their probe allows (no
# tombstones), so a lookup ends at the first empty entry: one or two cache lines, where a sorted
# array of (term, row) took a binary search of ~7 dependent loads.
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint32_t, uint64_t
from skype._core.types cimport term_t


cdef inline size_t rowmap_home(term_t t, size_t mask) noexcept nogil:
    return <size_t>(((<uint64_t>t) * 11400714819323198485u) >> 40) & mask      # Fibonacci hashing


cdef inline int64_t rowmap_find(const vector[uint64_t]* m, term_t t) noexcept nogil:
    """The row of term t, or -1."""
    cdef size_t mask, i
    cdef uint64_t e
    if m.size() == 0:
        return -1
    mask = m.size() - 1
    i = rowmap_home(t, mask)
    while True:
        e = m[0][i]
        if e == 0:
            return -1
        if <term_t>(e >> 32) == t:
            return <int64_t>(e & 0xFFFFFFFFu)
        i = (i + 1) & mask


cdef inline void _rowmap_put(vector[uint64_t]* m, uint64_t e) noexcept nogil:
    cdef size_t mask = m.size() - 1
    cdef size_t i = rowmap_home(<term_t>(e >> 32), mask)
    while m[0][i] != 0:
        i = (i + 1) & mask
    m[0][i] = e


cdef inline void rowmap_insert(vector[uint64_t]* m, term_t t, uint32_t row, size_t held) noexcept nogil:
    """Term t (absent) at ``row``; ``held`` entries are in the map before it."""
    cdef vector[uint64_t] old
    cdef size_t j
    if (held + 1) * 2 > m.size():                  # grow: keep it at most half full
        old.swap(m[0])
        m.assign(max(<size_t>16, old.size() * 2), 0)
        for j in range(old.size()):
            if old[j]:
                _rowmap_put(m, old[j])
    _rowmap_put(m, ((<uint64_t>t) << 32) | row)


cdef inline void rowmap_erase(vector[uint64_t]* m, term_t t) noexcept nogil:
    """Term t out of the map (nothing when absent)."""
    cdef size_t mask, i, j, h
    cdef uint64_t e
    if m.size() == 0:
        return
    mask = m.size() - 1
    i = rowmap_home(t, mask)
    while True:
        e = m[0][i]
        if e == 0:
            return
        if <term_t>(e >> 32) == t:
            break
        i = (i + 1) & mask
    j = i
    while True:                                    # shift back the entries whose probe passes i
        j = (j + 1) & mask
        e = m[0][j]
        if e == 0:
            break
        h = rowmap_home(<term_t>(e >> 32), mask)
        if ((j - h) & mask) >= ((j - i) & mask):
            m[0][i] = e
            i = j
    m[0][i] = 0
