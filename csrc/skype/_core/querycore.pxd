# The continuous query kinds beside topk: the stream's steps over sibling kinds (querykind.pxd).
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.querywindow cimport QueryWindow
from skype._core.querykind cimport QueryKind
from skype._core.rangequery cimport RangeKind
from skype._core.knnquery cimport KnnKind
from skype._core.termsquery cimport TermsKind
from skype._core.termgrid cimport TermGrid


cdef class QueryCore:
    cdef QueryWindow qw
    # the kinds, each behind the QueryKind hooks (a step calls them in this order)
    cdef readonly RangeKind range_kind
    cdef readonly KnnKind knn_kind
    cdef readonly TermsKind terms_kind
    # the change log of the kinds, in columns (every kind emits into them)
    cdef vector[int64_t] out_at, out_sub, out_entry
    cdef vector[uint8_t] out_entered
    cdef uint64_t arrivals, expirations, flushes
    # timers (with `timers`): AMP, EMP and the steps' netting cover a step whole; each kind's
    # share (its netting included) is in its `ns`, the window's upkeep in window_ns
    cdef bint timers
    cdef double arrival_ns, expiry_ns, flush_ns, window_ns
    # snapshot terms: per-term count tables of the whole window (built at the first such query)
    cdef TermGrid snap_grid
    cdef bint snap_grid_on

    cdef double _lap(self, double* ns, double t0) noexcept nogil
    cdef void _expire_oldest(self, int64_t at) noexcept nogil
    cdef void _arrive(self, int64_t at, int64_t ext_id, double x, double y, double t,
                      const uint32_t* terms, const double* w, int n) noexcept nogil
    cdef void _flush(self, int64_t at) noexcept nogil
