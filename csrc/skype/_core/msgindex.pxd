# Message index over the window: per-term quadtrees with best-first retrieval by score.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport term_t, seq_t, RectC, SubTermC
from skype._core.window cimport WindowStore


cdef packed struct MEntryC:      # a window message in a term's tree leaf (12 bytes)
    seq_t seq
    float w                      # the message's weight for the term, rounded up


cdef struct MNodeC:
    RectC rect
    int32_t child                # first of 4 consecutive children, -1 for a leaf
    int32_t parent               # -1 for a root
    uint32_t count               # messages in the subtree
    uint32_t depth
    float maxw                   # exact max of the entries' w over the subtree (0 if empty)


cdef struct HeapItemC:           # best-first queue item; max-heap on (key, tie)
    double key                   # score upper bound (node, cursor) or exact score (message)
    uint64_t tie                 # message: seq (newer first); node/cursor: UINT64_MAX (expand first)
    int32_t node                 # node id, -1 for a message
    uint32_t cursor              # cursor items: next entry in the leaf
    uint32_t qterm               # index of the tree's term among the query's terms


cdef class MessageIndex:
    cdef WindowStore window
    cdef RectC bounds
    cdef double max_dist
    cdef uint32_t leaf_capacity
    cdef uint32_t max_depth
    cdef vector[int32_t] root                  # term id -> root node (-1: no message)
    cdef vector[MNodeC] nodes
    cdef vector[vector[MEntryC]] entries       # per node: leaf entries sorted by w descending
    cdef vector[int32_t] free_blocks           # first ids of free 4-node child blocks
    cdef vector[int32_t] free_roots            # free single node ids
    cdef uint64_t entry_count
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
    cdef int32_t _new_root(self) noexcept nogil
    cdef int32_t _new_block(self) noexcept nogil
    cdef void _split(self, int32_t n) noexcept nogil
    cdef void _gather(self, int32_t n, vector[MEntryC]* out) noexcept nogil
    cdef void _collapse(self, int32_t n) noexcept nogil
    cdef double _bound(self, int32_t n, uint32_t qi, float w) noexcept nogil
    cdef void _push(self, double key, uint64_t tie, int32_t node, uint32_t cursor, uint32_t qterm) noexcept nogil
    cdef HeapItemC _pop(self) noexcept nogil
