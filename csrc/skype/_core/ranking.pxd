# Ranked retrieval over the window: the interface the result buffers re-evaluate through, and the
# best-first machinery (heap, term bound, designated scoring) its two message indexes share.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport seq_t, SubTermC
from skype._core.window cimport WindowStore


cdef struct HeapItemC:           # best-first queue item; max-heap on (key, tie)
    double key                   # score upper bound (a group of entries) or exact score (message)
    uint64_t tie                 # message: seq (newer first); otherwise UINT64_MAX (expand first)
    int32_t node                 # the index's own item tag or node id; -1 for a message
    uint32_t cursor              # the index's position inside the item
    uint32_t qterm               # index of the list's term among the query's terms
    uint32_t ctx                 # the index's own context of a group (0 if unused)


cdef inline bint heap_before(const HeapItemC* a, const HeapItemC* b) noexcept nogil:
    """True when a must pop before b."""
    return a.key > b.key or (a.key == b.key and a.tie > b.tie)


cdef class WindowRanking:
    """Every window message that shares a term with a subscription, in exact ranking order
    (score descending, then newer first), one query at a time."""
    cdef WindowStore window
    cdef double max_dist
    cdef uint64_t entry_count                  # (term, message) entries held
    # query state (one query at a time)
    cdef double q_alpha, q_x, q_y
    cdef const SubTermC* q_terms
    cdef int q_n
    cdef vector[double] q_rest                 # per query term: norm of the other terms' weights
    cdef vector[HeapItemC] heap
    cdef uint64_t q_work                       # heap pops of the current query (cost units)
    cdef uint64_t total_queries
    cdef uint64_t total_work

    cdef void insert(self, seq_t seq) noexcept nogil
    cdef void remove(self, seq_t seq) noexcept nogil
    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil
    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil
    cdef void _begin(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil
    cdef double _text_bound(self, uint32_t qi, double w) noexcept nogil
    cdef void _push(self, double key, uint64_t tie, int32_t node, uint32_t cursor, uint32_t qterm) noexcept nogil
    cdef void _push_item(self, HeapItemC item) noexcept nogil
    cdef HeapItemC _pop(self) noexcept nogil
    cdef double _offer(self, seq_t seq, uint32_t qterm) noexcept nogil
