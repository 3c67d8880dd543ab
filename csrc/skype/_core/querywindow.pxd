# The query kinds' window: a window store and message index of its own, with term ids shifted
# by one so that term 0 (ALL_TERM) is held by every message (a spatial tree over the window).
from libcpp.vector cimport vector
from libcpp.string cimport string
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, seq_t, RectC, MsgTermC
from skype._core.window cimport WindowStore, MsgC
from skype._core.msgindex cimport MessageIndex

cdef enum:
    ALL_TERM = 0


cdef struct NearC:                 # best-first kNN queue item; min-heap on (key, -tie)
    double key                     # node: MINDIST; message: its distance
    uint64_t tie                   # message: seq (newer first); node: UINT64_MAX (expand first)
    int32_t node                   # node id, -1 for a message
    uint32_t cover                 # index of the tree's term in the cover


cdef class QueryWindow:
    cdef WindowStore window
    cdef MessageIndex index
    cdef uint64_t count_window     # N of a count window, 0 for a time window
    cdef double time_window        # T of a time window, 0 for a count window
    cdef double max_dist
    cdef vector[string] names      # term name by shifted id (UTF-8; term ties sort by it)
    cdef vector[MsgTermC] scratch  # the arriving message's terms, ALL_TERM first
    cdef vector[uint8_t] stack     # predicate evaluation
    cdef vector[int32_t] walk      # tree walk
    cdef vector[int32_t] cut       # leaves a counting walk cuts (scanned only when needed)
    cdef vector[NearC] heap        # kNN queue
    cdef bint term_trees           # the per-term trees are kept
    cdef bint spatial_tree         # the ALL_TERM tree is kept

    cdef seq_t c_append(self, int64_t ext_id, double x, double y, double t,
                        const uint32_t* terms, const double* w, int n) noexcept nogil
    cdef void c_need_term_trees(self) noexcept nogil
    cdef void c_need_spatial_tree(self) noexcept nogil
    cdef bint c_accept_any(self, const MsgC* m, const int64_t* prog, int plen, const int64_t* cover,
                           int ncover) noexcept nogil
    cdef bint c_must_expire(self, double t, bint arriving) noexcept nogil
    cdef void c_pop_oldest(self) noexcept nogil
    cdef bint c_fresh(self, const MsgC* m, double now, double last) noexcept nogil
    cdef bint c_accept(self, const MsgC* m, uint32_t via, const int64_t* prog, int plen,
                       const int64_t* cover, int ncover) noexcept nogil
    cdef void c_range(self, const RectC* r, const int64_t* prog, int plen, const int64_t* cover, int ncover,
                      double now, double last, vector[seq_t]* out) noexcept nogil
    cdef void c_knn(self, double x, double y, size_t k, const int64_t* prog, int plen,
                    const int64_t* cover, int ncover, double now, double last,
                    vector[seq_t]* out, vector[double]* dist) noexcept nogil
    cdef void _near_push(self, double key, uint64_t tie, int32_t node, uint32_t cover) noexcept nogil
    cdef NearC _near_pop(self) noexcept nogil
    cdef void c_region_counts(self, const RectC* r, double now, double last,
                              vector[uint32_t]* counts, vector[term_t]* touched) noexcept nogil
    cdef uint32_t c_count_in(self, term_t t, const RectC* r) noexcept nogil
    cdef uint32_t c_count_bounded(self, term_t t, const RectC* r, uint32_t need) noexcept nogil
    cdef uint32_t _count_leaf(self, int32_t n, const RectC* r, const RectC* rd) noexcept nogil
    cdef void c_top_terms(self, vector[uint32_t]* counts, vector[term_t]* touched, size_t k,
                          vector[term_t]* out) noexcept nogil
