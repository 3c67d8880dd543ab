# Message index over the window: per-term quadtrees with best-first retrieval by score.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t
from skype._core.types cimport seq_t, RectC, SubTermC
from skype._core.ranking cimport WindowRanking


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


cdef class MessageIndex(WindowRanking):
    cdef RectC bounds
    cdef uint32_t leaf_capacity
    cdef uint32_t max_depth
    cdef vector[int32_t] root                  # term id -> root node (-1: no message)
    cdef vector[MNodeC] nodes
    cdef vector[vector[MEntryC]] entries       # per node: leaf entries sorted by w descending
    cdef vector[int32_t] free_blocks           # first ids of free 4-node child blocks
    cdef vector[int32_t] free_roots            # free single node ids

    cdef void insert(self, seq_t seq) noexcept nogil
    cdef void remove(self, seq_t seq) noexcept nogil
    cdef void insert_terms(self, seq_t seq, uint32_t first, uint32_t stop) noexcept nogil
    cdef void remove_terms(self, seq_t seq, uint32_t first, uint32_t stop) noexcept nogil
    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil
    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil
    cdef int32_t _new_root(self) noexcept nogil
    cdef int32_t _new_block(self) noexcept nogil
    cdef void _split(self, int32_t n) noexcept nogil
    cdef void _gather(self, int32_t n, vector[MEntryC]* out) noexcept nogil
    cdef void _collapse(self, int32_t n) noexcept nogil
    cdef double _bound(self, int32_t n, uint32_t qi, float w) noexcept nogil
