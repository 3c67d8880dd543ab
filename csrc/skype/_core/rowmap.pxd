# A block's map from term to row (termlanes.pyx, termblocks.pyx): a sorted array of uint64 entries
# ``term << 32 | row`` (so ordered by term), searched by bisection.  An open-addressing table was
# tried in its place (one probe a lookup instead of ~7) and was slower in a paired run: the
# events look up the message's terms in one block after another, and the sorted array's upper
# levels stay in cache between them (docs/results/2026-11-29-kinds-mixed.md).
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint32_t, uint64_t
from skype._core.types cimport term_t


cdef inline size_t rowmap_lower(const vector[uint64_t]* m, term_t t) noexcept nogil:
    """The first entry whose term is not below t."""
    cdef size_t lo = 0, hi = m.size(), mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if <term_t>(m[0][mid] >> 32) < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int64_t rowmap_find(const vector[uint64_t]* m, term_t t) noexcept nogil:
    """The row of term t, or -1."""
    cdef size_t pos = rowmap_lower(m, t)
    if pos < m.size() and <term_t>(m[0][pos] >> 32) == t:
        return <int64_t>(m[0][pos] & 0xFFFFFFFFu)
    return -1


cdef inline void rowmap_insert(vector[uint64_t]* m, term_t t, uint32_t row) noexcept nogil:
    """Term t (absent) at ``row``."""
    cdef size_t pos = rowmap_lower(m, t)
    m.insert(m.begin() + pos, ((<uint64_t>t) << 32) | row)


cdef inline void rowmap_erase(vector[uint64_t]* m, term_t t) noexcept nogil:
    """Term t out of the map (nothing when absent)."""
    cdef size_t pos = rowmap_lower(m, t)
    if pos < m.size() and <term_t>(m[0][pos] >> 32) == t:
        m.erase(m.begin() + pos)
