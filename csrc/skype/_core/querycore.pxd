# The continuous query kinds beside topk: range here, knn and terms in its base classes.
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, seq_t, RectC, MsgTermC
from skype._core.rangeindex cimport RectSubIndex
from skype._core.kwrangeindex cimport KeywordRangeIndex
from skype._core.knnquery cimport KnnCore
from skype._core.termgrid cimport TermGrid


cdef class QueryCore(KnnCore):
    cdef RectSubIndex ranges               # range subscriptions (range_keyword off)
    cdef KeywordRangeIndex kw_ranges       # range subscriptions, keyword first (range_keyword on)
    cdef bint range_keyword
    cdef vector[uint32_t] hits
    cdef uint64_t arrivals, expirations
    cdef double arrival_ns, expiry_ns
    # per kind: subscriptions probed (reached and checked), matches, time (ns; with `timers`)
    cdef bint timers
    cdef uint64_t range_matches, terms_matches
    cdef double range_ns, knn_ns, terms_ns, window_ns
    # the step's netting (_flush: knn and terms events), timed apart from AMP and EMP; its
    # per-kind shares are also in knn_ns and terms_ns
    cdef double flush_ns, knn_net_ns, terms_net_ns
    cdef uint64_t flushes
    # snapshot terms: per-term count tables of the whole window (built at the first such query)
    cdef TermGrid snap_grid
    cdef bint snap_grid_on

    cdef void _expire_oldest(self, int64_t at) noexcept nogil
    cdef void _range_probe(self, int64_t at, double x, double y, const MsgTermC* mt, uint32_t nterms,
                           int64_t msg, bint entered) noexcept nogil
    cdef void _arrive(self, int64_t at, int64_t ext_id, double x, double y, double t,
                      const uint32_t* terms, const double* w, int n) noexcept nogil
    cdef void _flush(self, int64_t at) noexcept nogil
    cdef object _range(self, const RectC* r, const int64_t* prog, int plen, const int64_t* cover, int ncover,
                       double now, double last)
