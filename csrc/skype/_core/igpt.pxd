# IGPT and IPT (igpt.pyx): the paper's quadtree subscription index with individual and group
# pruning; its dissemination over the layout of igptlayout.pxd.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint8_t, uint32_t
from skype._core.types cimport term_t, sid_t, MsgTermC
from skype._core.igptlayout cimport IGPTLayout, PEntryC


cdef struct CandStateC:           # a subscription met by the current message (8 bytes)
    uint32_t sid                  # hash-table key (EMPTY_SLOT when free)
    int32_t last                  # DECIDED once its fate for this message is known


cdef struct PendingC:             # a first meeting that survived the entry test (term batch)
    uint32_t sid
    uint32_t leaf


cdef class IGPTIndex(IGPTLayout):
    # per-message scratch
    cdef uint32_t stamp
    cdef bint walked
    cdef vector[uint32_t] leaf_stamp
    cdef vector[double] leaf_osb
    cdef vector[double] leaf_dout
    cdef vector[uint8_t] leaf_pruned
    cdef vector[CandStateC] cand           # open-addressing table of the message's candidates
    cdef uint32_t cand_bits                # the table has 2^cand_bits slots
    cdef vector[uint32_t] cand_slots       # occupied slots (cleared per message)
    cdef vector[PendingC] pending          # first meetings of the current term, visited together
    cdef double m_x, m_y               # the message's location
    cdef int m_n                       # its number of terms
    cdef const MsgTermC* m_msg         # its terms (valid during disseminate)
    cdef vector[double] m_wtsum        # per message position: suffix sum / max of weights
    cdef vector[double] m_maxwt
    cdef vector[int32_t] stack

    cdef void _ensure_scratch(self) noexcept nogil
    cdef CandStateC* _cand_find(self, sid_t sid) noexcept nogil
    cdef CandStateC* _cand_insert(self, sid_t sid) noexcept nogil
    cdef void _cand_clear(self) noexcept nogil
    cdef void _visit(self, sid_t sid, int j, term_t t, uint32_t leaf) noexcept nogil
    cdef void _walk(self, double x, double y) noexcept nogil
    cdef bint _leaf_open(self, uint32_t leaf, double x, double y) noexcept nogil
    cdef bint _cut(self, const PEntryC* e, double wts_m, double osb) noexcept nogil
    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
    cdef double _m_maxwt_after(self, int j) noexcept nogil
    cdef void _member(self, const PEntryC* e, int j, term_t t, uint32_t leaf, double osb) noexcept nogil
    cdef void _visit_pending(self, int j, term_t t) noexcept nogil
