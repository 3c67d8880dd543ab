# Bulk registration: one replay of the window through a temporary index (see bulk.pyx).
from libc.stdint cimport int32_t, uint32_t, uint64_t
from libcpp.vector cimport vector
from skype._core.types cimport sid_t
from skype._core.window cimport WindowStore
from skype._core.subindex cimport SubTable, SubscriptionIndex
from skype._core.buffers cimport Buffers

cdef uint32_t bulk_capacity(Buffers b, int32_t k) noexcept nogil
cdef uint64_t bulk_replay(Buffers b, SubscriptionIndex tmp, SubTable table, WindowStore window,
                          const sid_t* sids, size_t n, uint64_t seed, size_t batch, double* build_ns) noexcept nogil
cdef void sample_then_rest(Buffers b, SubTable table, vector[sid_t]& sids, vector[sid_t]& rest,
                           bint adapt) noexcept nogil
