# The continuous terms kind, design 3: lanes in blocks of 64, exact counts in rows shared by a
# block, a threshold per lane between its k-th and (k+1)-th terms (termblocks.pyx; the state is
# termlanes.pxd's).
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, RectC, MsgTermC
from skype._core.termlanes cimport BlockRows


cdef class TermBlocks(BlockRows):
    cdef uint32_t c_add(self, int64_t ext_id, const RectC* r, uint32_t k) noexcept nogil
    cdef void c_remove(self, uint32_t slot) noexcept nogil
    cdef void c_event(self, double x, double y, const MsgTermC* mt, uint32_t nterms, int delta) noexcept nogil
    cdef void c_flush(self, int64_t at, vector[int64_t]* out_at, vector[int64_t]* out_sub,
                      vector[int64_t]* out_entry, vector[uint8_t]* out_entered) noexcept nogil
    cdef void c_relabel(self) noexcept nogil
    cdef void _untracked(self, uint32_t b, term_t t, uint64_t u) noexcept nogil
    cdef void _refill(self, uint32_t slot) noexcept nogil
    cdef void _rerank(self, uint32_t slot, bint emit, int64_t at, vector[int64_t]* out_at,
                      vector[int64_t]* out_sub, vector[int64_t]* out_entry,
                      vector[uint8_t]* out_entered) noexcept nogil
    cdef bint _rerank_light(self, uint32_t slot, int64_t at, vector[int64_t]* out_at,
                            vector[int64_t]* out_sub, vector[int64_t]* out_entry,
                            vector[uint8_t]* out_entered) noexcept nogil
