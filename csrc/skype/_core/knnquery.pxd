# The continuous knn kind, a sibling of QueryCore's other kinds (bounded buffers, the `near` index).
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport seq_t, MsgTermC
from skype._core.window cimport MsgC
from skype._core.rangeindex cimport RectSubIndex
from skype._core.querykind cimport QueryKind


cdef struct NearEntryC:            # a kNN buffer entry
    double dist
    seq_t seq
    int64_t ext_id                 # the message's id (no window read when it enters or leaves)


cdef struct KnnEventC:             # a message entering (+1) or leaving (-1) a top-k within a step
    uint32_t slot
    int32_t sign
    seq_t seq
    int64_t ext_id


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


cdef class KnnKind(QueryKind):
    cdef uint32_t knn_factor               # a buffer holds knn_factor * k entries
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
    # one step's netting: every crossing of a top-k boundary, in order (netted by _knn_net)
    cdef vector[KnnEventC] knn_events
    cdef vector[uint32_t] refill           # slots to refill once the expiring message has left the window
    cdef vector[seq_t] seqs                # scratch of a refill
    cdef vector[double] dists
    cdef uint64_t reevaluations, knn_probed, knn_matches, knn_removed

    cdef void _knn_arriving(self, double x, double y, seq_t seq, int64_t ext_id, const MsgTermC* mt,
                            uint32_t nterms) noexcept nogil
    cdef void _knn_expiring(self, const MsgC* m, const MsgTermC* mt, vector[uint32_t]* refill) noexcept nogil
    cdef void _knn_refilled(self, const vector[uint32_t]* refill) noexcept nogil
    cdef void _knn_net(self, int64_t at) noexcept nogil
    cdef void _knn_event(self, uint32_t slot, const NearEntryC* e, int32_t sign) noexcept nogil
    cdef void _knn_refill(self, uint32_t slot) noexcept nogil
    cdef void _knn_post(self, uint32_t slot) noexcept nogil
    cdef void _knn_offer(self, uint32_t slot, double x, double y, seq_t seq, int64_t ext_id, const MsgTermC* mt,
                         uint32_t nterms, bint checked) noexcept nogil
    cdef bint _knn_drop(self, uint32_t slot, seq_t seq) noexcept nogil
