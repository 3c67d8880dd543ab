# Re-evaluation of result buffers (reevaluation.pyx): the pull in ranking order that chooses a
# threshold (exact, kmax, Skyband, cSkyband's cost model) and rebuilds the buffer from it; the
# base class of Buffers (buffers.pyx), which admits, expires and floors.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport sid_t, seq_t
from skype._core.arena cimport BufEntryC
from skype._core.ranking cimport WindowRanking
from skype._core.bufstore cimport BufferStore
from skype._core.costmodel cimport CostModelC


cdef packed struct RankedC:       # a (score, message) pair of a bulk-registration run (12 bytes)
    double score
    uint32_t seq_lo


cdef struct PulledC:             # a message pulled from the message index in ranking order
    seq_t seq
    double score


cdef enum BufferKind:
    BUF_EXACT = 0
    BUF_CSKYBAND = 1
    BUF_SKYBAND = 2
    BUF_KMAX = 3


cdef class Reevaluation(BufferStore):
    cdef int kind
    cdef WindowRanking msgs
    # parameters
    cdef double skyband_ratio
    cdef int32_t kmax
    cdef double query_cost
    cdef int32_t stop_after                  # delta: consecutive cost increases that stop the scan
    cdef int32_t nmax_factor                 # scan at most nmax_factor * k messages
    cdef double refresh_factor               # re-evaluate a complete buffer past refresh_factor * k
    # cSkyband's cost model (costmodel.pxd): its costs, barrier and window estimates (count
    # windows: N fixed, arrivals and expiries 1/2 each)
    cdef CostModelC model
    cdef bint count_window                   # False: a time window (N and the rates are estimated)
    # the cost model's C_q: the message index's work per re-evaluation, over the real queries
    cdef uint64_t reeval_work, n_queries
    cdef double cq_mean
    # scratch
    cdef bint plan_constrained                # the last cost scan wanted fewer than k messages
    cdef vector[PulledC] pulled
    cdef vector[BufEntryC] rebuilt
    cdef vector[uint32_t] old_seqs, new_seqs, old_all
    cdef vector[seq_t] heap
    # bulk registration (bulk.pyx): _pull reads a prepared ranking-order run instead of the
    # message index; past its end, a truncated run restarts the message index and skips it
    cdef const RankedC* src
    cdef size_t src_n, src_pos
    cdef bint src_truncated, src_fell_back
    cdef sid_t src_sid
    cdef uint64_t n_bulk_fallbacks
    cdef size_t last_scan                    # messages the last scan pulled
    cdef bint timed                          # time re-evaluations (engine.set_timers)
    cdef double reeval_ns
    cdef int32_t bulk_factor                 # skyband kinds: bulk runs hold bulk_factor * k (+ ties)

    cdef bint _next(self, seq_t* seq, double* score) noexcept nogil
    cdef bint _pull(self, sid_t sid, double* theta) noexcept nogil
    cdef void _reevaluate(self, sid_t sid, bint emit, bint notify) noexcept nogil
    cdef void _reevaluate_from(self, sid_t sid, const RankedC* run, size_t n, bint truncated) noexcept nogil
    cdef void _rebuild(self, sid_t sid, bint emit, bint notify) noexcept nogil
    cdef bint _contains(self, vector[uint32_t]* sorted_vals, uint32_t v) noexcept nogil
    cdef void _diff_events(self, sid_t sid, int32_t k) noexcept nogil

    # hot helper, inlined into its callers (here and in buffers.pyx's admission)
    cdef inline int32_t _cap(self, int32_t k) noexcept nogil:
        """How many entries an exact or kmax buffer keeps: k, or max(kmax, k)."""
        if self.kind == BUF_EXACT or self.kmax < k:
            return k
        return self.kmax


# the k-skyband pass's heap of the k newest seqs seen (_rebuild, Buffers._readmit_skipped)
cdef inline void heap_push_min(vector[seq_t]* h, seq_t v) noexcept nogil:
    cdef size_t i = h.size(), p
    h.push_back(v)
    while i > 0:
        p = (i - 1) >> 1
        if h[0][p] <= v:
            break
        h[0][i] = h[0][p]
        i = p
    h[0][i] = v


cdef inline void heap_replace_min(vector[seq_t]* h, seq_t v) noexcept nogil:
    cdef size_t i = 0, c, n = h.size()
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and h[0][c + 1] < h[0][c]:
            c += 1
        if h[0][c] >= v:
            break
        h[0][i] = h[0][c]
        i = c
    h[0][i] = v


cdef inline uint32_t skyband_dominators(vector[seq_t]* h, seq_t seq, int32_t k) noexcept nogil:
    """The k-skyband pass over messages in ranking order: the dominance counter of the next
    message ``seq`` (how many messages ranked before it are newer, capped at k); ``h`` is the
    min-heap of the k newest seqs ranked so far, updated here.  A result >= k: not a member."""
    cdef uint32_t dc = 0
    cdef size_t j
    if <int32_t>h.size() == k and h[0][0] > seq:
        return <uint32_t>k                      # k newer, higher-ranked messages
    for j in range(h.size()):
        if h[0][j] > seq:
            dc += 1
    if <int32_t>h.size() < k:
        heap_push_min(h, seq)
    elif seq > h[0][0]:
        heap_replace_min(h, seq)
    return dc
