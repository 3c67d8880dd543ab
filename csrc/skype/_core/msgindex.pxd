# Message index over the window: per-term quadtrees with best-first retrieval by score.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport seq_t, RectC, SubTermC
from skype._core.ranking cimport WindowRanking


cdef packed struct MEntryC:      # a window message in a term's tree leaf (28 bytes)
    seq_t seq
    float w                      # the message's weight for the term, rounded up
    float x, y                   # its coordinates rounded down (entry_in_rect)
    uint64_t sig                 # bit term_bit(u) set for each term u of the message


cdef inline uint64_t term_bit(uint32_t t) noexcept nogil:
    """A term's bit in an entry's signature (a message without the bit does not hold the term)."""
    return (<uint64_t>1) << ((t * <uint32_t>2654435761u) >> 26)


cdef inline int entry_in_rect(const MEntryC* e, const RectC* r, const RectC* rd) noexcept nogil:
    """Whether an entry's message lies in r (edges included), from the entry alone: 1 inside, 0
    outside, -1 undecided (an edge within a float step of it: read the message).  The message's
    x lies in [e.x, next float above e.x) (likewise y); ``rd`` holds r's edges rounded down to
    floats, so e.x < rd.minx puts x below minx and e.x < rd.maxx puts it at most maxx."""
    cdef double x = e.x, y = e.y
    if x > r.maxx or y > r.maxy or x < rd.minx or y < rd.miny:
        return 0
    if x >= r.minx and y >= r.miny and x < rd.maxx and y < rd.maxy:
        return 1
    return -1


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
    cdef vector[int32_t] q_shadow              # per group (HeapItemC.ctx): each query term's node there
    cdef uint32_t q_floor_k                    # query_floor's k (0: every message is enumerated)
    cdef double q_floor                        # the k-th best score found so far (-inf before k)
    cdef vector[double] q_best                 # min-heap: the k best scores found so far
    cdef uint64_t total_reads                  # messages read from the window and scored
    cdef uint64_t total_entry_bounds           # leaf entries bounded alone
    cdef vector[double] lp_o                   # a leaf scan's constants: other query terms' parts
    cdef vector[uint64_t] lp_bit               # ... and their signature bits

    cdef void insert(self, seq_t seq) noexcept nogil
    cdef void remove(self, seq_t seq) noexcept nogil
    cdef void insert_terms(self, seq_t seq, uint32_t first, uint32_t stop) noexcept nogil
    cdef void remove_terms(self, seq_t seq, uint32_t first, uint32_t stop) noexcept nogil
    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil
    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil
    cdef void query_floor(self, uint32_t k) noexcept nogil
    cdef double _scan_leaf(self, int32_t n, uint32_t qi, uint32_t ctx, bint push) noexcept nogil
    cdef void _note_score(self, double score) noexcept nogil
    cdef int32_t _new_root(self) noexcept nogil
    cdef int32_t _new_block(self) noexcept nogil
    cdef void _split(self, int32_t n) noexcept nogil
    cdef void _gather(self, int32_t n, vector[MEntryC]* out) noexcept nogil
    cdef void _collapse(self, int32_t n) noexcept nogil
    cdef double _bound(self, int32_t n, uint32_t qi, float w, uint32_t ctx) noexcept nogil
    cdef double _entry_bound(self, const MEntryC* e, uint32_t qi, uint32_t ctx) noexcept nogil
    cdef void _push_group(self, int32_t n, uint32_t cursor, uint32_t qi, float w, uint32_t ctx) noexcept nogil
