# Registration by search over a per-term k-d tree of (x, y, weight) (regtree.pyx).
cimport cython
from libcpp.vector cimport vector
from libc.stdint cimport uint32_t, uint64_t
from skype._core.types cimport sid_t, SubTermC
from skype._core.subindex cimport SubTable, SubHotC
from skype._core.buffers cimport Buffers
from skype._core.reevaluation cimport RankedC
from skype._core.regsearch cimport RegistrationIndex, SBoxC, STermC


cdef struct TNodeC:              # a k-d tree node of one term's list (32 bytes: a child pair a line)
    float minx                   # the bounding box of its entries' locations, rounded outward
    float miny
    float maxx
    float maxy
    float maxw                   # their largest weight, rounded up
    uint32_t first               # its entries: [first, first + count)
    uint32_t count
    uint32_t child               # its children: nodes[child], nodes[child + 1]; 0: a leaf


@cython.final
cdef class RegistrationTree(RegistrationIndex):
    cdef vector[TNodeC] nodes
    cdef double weight_scale     # a weight extent against a location extent / MaxDist, when splitting
    cdef uint64_t n_descents

    cdef void build(self, SubTable table, const sid_t* sids, size_t n) noexcept nogil
    cdef void _split(self, uint32_t node) noexcept nogil
    cdef double _node_bound(self, const SubHotC* h, const SubTermC* terms, uint32_t qi,
                            const TNodeC* nd) noexcept nogil
    cdef void top_c(self, const SubHotC* h, const SubTermC* terms, uint32_t cap,
                    vector[RankedC]* out) noexcept nogil
    cdef void _push_entry_items(self, const SubHotC* h, const SubTermC* terms, int qi,
                                const STermC* st) noexcept nogil


cdef void order_batch(SubTable table, vector[sid_t]& sids) noexcept nogil
cdef uint64_t search_register(Buffers b, RegistrationTree idx, SubTable table, const sid_t* sids,
                              size_t n, double* build_ns) noexcept nogil
