# The continuous range kind (rangequery.pyx), and the range answer that snapshots share.
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint32_t, uint64_t
from skype._core.types cimport RectC, MsgTermC
from skype._core.querywindow cimport QueryWindow
from skype._core.rangeindex cimport RectSubIndex
from skype._core.kwrangeindex cimport KeywordRangeIndex
from skype._core.querykind cimport QueryKind


cdef object range_answer(QueryWindow qw, const RectC* r, const int64_t* prog, int plen, const int64_t* cover,
                         int ncover, double now, double last)


cdef class RangeKind(QueryKind):
    cdef RectSubIndex ranges               # range subscriptions (keyword off)
    cdef KeywordRangeIndex kw_ranges       # range subscriptions, keyword first (keyword on)
    cdef bint keyword
    cdef vector[uint32_t] hits
    cdef uint64_t matches

    cdef void _probe(self, int64_t at, double x, double y, const MsgTermC* mt, uint32_t nterms, int64_t msg,
                     bint entered) noexcept nogil
