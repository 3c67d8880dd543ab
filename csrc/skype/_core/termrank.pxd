# The one rank order of the terms kind (both designs) and its change rows.  An ascending key ranks
# count descending, then name ascending: (UINT32_MAX - count) << 32 | label, where labels follow
# name order.  A result's change rows come from two sets of terms (its top-k before and after a
# step): a term in the new set only entered, one in the old set only left.
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t


cdef inline uint64_t term_key(uint32_t count, uint32_t label) noexcept nogil:
    return ((<uint64_t>(0xFFFFFFFFu - count)) << 32) | label


cdef inline uint32_t key_count(uint64_t key) noexcept nogil:
    return 0xFFFFFFFFu - <uint32_t>(key >> 32)


cdef inline uint32_t need_count(uint64_t theta, uint32_t label) noexcept nogil:
    """The least count whose key (with this label) is below theta."""
    cdef uint32_t c = key_count(theta)
    return c if label < <uint32_t>(theta & 0xFFFFFFFFu) else c + 1


cdef inline void _emit_absent(const vector[term_t]* terms, const vector[term_t]* other, uint8_t entered,
                              int64_t at, int64_t sub, vector[int64_t]* out_at, vector[int64_t]* out_sub,
                              vector[int64_t]* out_entry, vector[uint8_t]* out_entered) noexcept nogil:
    # one row per term of `terms` that `other` lacks (a top-k holds a few terms: a linear search)
    cdef size_t a, j
    cdef bint found
    for a in range(terms.size()):
        found = False
        for j in range(other.size()):
            if other[0][j] == terms[0][a]:
                found = True
                break
        if not found:
            out_at.push_back(at)
            out_sub.push_back(sub)
            out_entry.push_back(<int64_t>terms[0][a] - 1)
            out_entered.push_back(entered)


cdef inline void emit_set_changes(const vector[term_t]* now, const vector[term_t]* before, int64_t at,
                                  int64_t sub, vector[int64_t]* out_at, vector[int64_t]* out_sub,
                                  vector[int64_t]* out_entry, vector[uint8_t]* out_entered) noexcept nogil:
    """Subscription ``sub``'s rows at ``at``: the terms entered (in ``now`` only), then those left."""
    _emit_absent(now, before, 1, at, sub, out_at, out_sub, out_entry, out_entered)
    _emit_absent(before, now, 0, at, sub, out_at, out_sub, out_entry, out_entered)
