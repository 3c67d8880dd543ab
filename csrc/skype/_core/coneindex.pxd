# The cone-bounded index (index="cone"): dissemination over conetree.ConeLayout; see coneindex.pyx.
from libcpp.vector cimport vector
from libc.stdint cimport uint32_t, uint64_t
from skype._core.types cimport sid_t, MsgTermC
from skype._core.conetree cimport ConeLayout, ConePostC


cdef class ConeIndex(ConeLayout):
    cdef vector[sid_t] pending          # this message's survivors, verified together at the end
    cdef vector[uint32_t] level, following, leaves   # the walk's scratch
    cdef uint64_t nodes_tested, tree_read, tail_read, flat_read, pair_entries_read
    cdef uint64_t pair_pruned           # pair entries the pair bound skipped
    cdef bint pair_bound_on             # the pair bound (on; off only to A/B it: set_pair_bound)
    cdef bint timed
    cdef double scan_ns, verify_ns

    cdef bint _first_common(self, sid_t sid, uint32_t t, const MsgTermC* m, int n) noexcept nogil
    cdef void _posting(self, const ConePostC* p, const MsgTermC* m, int n, double x, double y,
                       double wm) noexcept nogil
    cdef void _scan(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
    cdef void _verify_pending(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
