# The continuous query kinds beside topk (range, knn, terms) and the snapshot queries.
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, seq_t, RectC, MsgTermC
from skype._core.rangeindex cimport RectSubIndex, KeywordRangeIndex
from skype._core.termsquery cimport TermsCore


cdef struct NearEntryC:            # a kNN buffer entry
    double dist
    seq_t seq


cdef struct KnnSubC:
    double x
    double y
    int64_t ext_id
    uint32_t k
    uint32_t cap                   # buffer capacity (>= k)
    uint8_t complete               # the buffer holds every matching window message
    uint8_t alive
    uint32_t post                  # its slot in the `near` index (with knn_index)
    double posted                  # the radius it is posted with there (-1: not posted)


cdef class QueryCore(TermsCore):
    cdef RectSubIndex ranges               # range subscriptions (range_keyword off)
    cdef KeywordRangeIndex kw_ranges       # range subscriptions, keyword first (range_keyword on)
    cdef bint range_keyword
    # knn subscriptions, by slot
    cdef vector[KnnSubC] knn
    cdef vector[vector[int64_t]] knn_prog  # predicate program, then cover terms
    cdef vector[uint32_t] knn_plen
    cdef vector[vector[NearEntryC]] knn_buf
    cdef vector[uint32_t] knn_free
    cdef vector[vector[uint32_t]] knn_lists    # by cover term: knn slots (ALL_TERM: no predicate)
    cdef vector[uint64_t] knn_stamp
    cdef uint64_t knn_probes
    cdef bint knn_index                    # candidates from `near` (else from knn_lists)
    cdef RectSubIndex near                 # knn subscriptions by their k-th distance circle's box
    cdef vector[uint32_t] near_hits
    cdef uint64_t knn_posts
    # one step's netting: touched knn slots and their results before the step (terms: TermsCore)
    cdef vector[uint64_t] knn_touch_step
    cdef vector[uint32_t] knn_touched
    cdef vector[vector[int64_t]] knn_before       # seqs
    cdef vector[vector[int64_t]] knn_before_ids   # their ids
    cdef vector[int64_t] out_at, out_sub, out_entry
    cdef vector[uint8_t] out_entered
    cdef vector[uint32_t] hits
    cdef vector[seq_t] seqs
    cdef vector[double] dists
    cdef uint64_t arrivals, expirations, reevaluations
    cdef double arrival_ns, expiry_ns
    # per kind: subscriptions probed (reached and checked), matches, time (ns; with `timers`)
    cdef bint timers
    cdef uint64_t range_matches, knn_probed, knn_matches, knn_removed, terms_matches
    cdef double range_ns, knn_ns, terms_ns, window_ns

    cdef void _expire_oldest(self, int64_t at) noexcept nogil
    cdef void _range_probe(self, int64_t at, double x, double y, const MsgTermC* mt, uint32_t nterms,
                           int64_t msg, bint entered) noexcept nogil
    cdef void _arrive(self, int64_t at, int64_t ext_id, double x, double y, double t,
                      const uint32_t* terms, const double* w, int n) noexcept nogil
    cdef void _knn_touch(self, uint32_t slot) noexcept nogil
    cdef void _knn_refill(self, uint32_t slot) noexcept nogil
    cdef void _knn_post(self, uint32_t slot) noexcept nogil
    cdef void _knn_offer(self, uint32_t slot, double x, double y, seq_t seq, const MsgTermC* mt, uint32_t nterms,
                         bint checked) noexcept nogil
    cdef bint _knn_drop(self, uint32_t slot, seq_t seq) noexcept nogil
    cdef void _flush(self, int64_t at) noexcept nogil
    cdef void _emit(self, int64_t at, int64_t sub, int64_t entry, bint entered) noexcept nogil
    cdef object _range(self, const RectC* r, const int64_t* prog, int plen, const int64_t* cover, int ncover,
                       double now, double last)
