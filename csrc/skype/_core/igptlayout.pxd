# The quadtree and posting lists of IGPT and IPT (igptlayout.pyx) and their upkeep; igpt.pyx
# disseminates over them.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, RectC, SubTermC
from skype._core.subindex cimport SubscriptionIndex, SID_BITS

cdef extern from *:
    """
    #define SKYPE_IGPT_EPS 1e-9
    """
    double EPS "SKYPE_IGPT_EPS"  # every rule skips only on a bound below the threshold by this

cdef enum:
    SID_MASK = (1 << SID_BITS) - 1   # a posting's sid_group: sid | alpha-group << SID_BITS


cdef inline double suffix_max(const SubTermC* st, int i, int n) noexcept nogil:
    """maxwt(s, i): the largest weight from position i on."""
    cdef double m = 0.0
    while i < n:
        if st[i].w > m:
            m = st[i].w
        i += 1
    return m


cdef packed struct PEntryC:      # one subscription in a (term, leaf) posting list, 28 bytes
    uint32_t sid_group           # sid | group << SID_BITS
    float a                      # lower bound of a_s = theta_s / (1 - alpha_s); -inf: never text-pruned
    float mw                     # suffix max over the group (from here) of maxwt(s, pos_s(t)), rounded up
    float b                      # suffix max over the group (from here) of b_s = alpha/(1-alpha), rounded up
    float own_b                  # this subscription's b_s, rounded up
    float own_w                  # its weight w(s, pos_s(t)), rounded up
    float own_rest               # its wtsum(s, pos_s(t) + 1) (the terms after t), rounded up


cdef struct LeafPLC:             # where the posting list of one leaf starts in a term's entries
    uint32_t leaf
    uint32_t start


cdef struct TermPostC:           # all posting lists of one term, leaf by leaf (term-major layout)
    vector[LeafPLC] pls          # sorted by leaf id
    vector[PEntryC] entries      # leaf segments in pls order; each sorted by (group, a)


cdef struct QNodeC:              # subscription quadtree node
    RectC rect
    int32_t child                # first of 4 consecutive children, -1 for a leaf
    int32_t parent
    int32_t leaf                 # leaf id when a leaf, else -1
    uint32_t depth
    double theta_s               # min theta_S over the subtree (a lower bound, Lemma 6)


cdef class IGPTLayout(SubscriptionIndex):
    cdef uint32_t leaf_capacity
    cdef uint32_t max_depth
    cdef int ngroups
    cdef vector[double] group_bounds   # ngroups - 1 ascending alpha boundaries
    # pruning rules
    cdef bint rule_cell, rule_group, rule_early, rule_entry, rule_prefix, rule_spatial, rule_unseen, rule_exact_spatial
    cdef int cell_walk                 # 0 never, 1 always, 2 auto
    cdef double theta_refresh          # raise the indexed threshold when theta exceeds it by this
    # quadtree
    cdef vector[QNodeC] nodes
    cdef vector[int32_t] leaf_node     # leaf id -> node (-1: retired leaf)
    cdef vector[vector[sid_t]] leaf_subs
    cdef vector[uint32_t] leaf_raises  # lazy theta_S raises since the last exact recompute
    # postings
    cdef vector[TermPostC] postings    # term id -> its posting lists
    cdef uint64_t posting_count

    cdef int _group_of(self, double alpha) noexcept nogil
    cdef float _a_of(self, sid_t sid) noexcept nogil
    cdef float _b_of(self, sid_t sid) noexcept nogil
    cdef double _theta_s_of(self, sid_t sid) noexcept nogil
    cdef int32_t _new_leaf_node(self, RectC rect, int32_t parent, uint32_t depth) noexcept nogil
    cdef uint32_t _find_leaf(self, double x, double y) noexcept nogil
    cdef void _lower_theta_s(self, uint32_t leaf, double v) noexcept nogil
    cdef void _recompute_theta_s(self, uint32_t leaf) noexcept nogil
    cdef void _split(self, uint32_t leaf, bint with_postings) noexcept nogil
    cdef void _tree_insert(self, sid_t sid, bint with_postings) noexcept nogil
    cdef size_t _pl_index(self, TermPostC* tp, uint32_t leaf) noexcept nogil
    cdef size_t _seg_end(self, TermPostC* tp, size_t i) noexcept nogil
    cdef void _fix_group(self, TermPostC* tp, term_t t, size_t start, size_t end) noexcept nogil
    cdef void _fix_segment(self, TermPostC* tp, term_t t, size_t start, size_t end) noexcept nogil
    cdef void _insert_entry(self, term_t t, uint32_t leaf, sid_t sid) noexcept nogil
    cdef void _remove_entry(self, term_t t, uint32_t leaf, sid_t sid) noexcept nogil
    cdef void _insert_postings(self, sid_t sid) noexcept nogil
    cdef void _split_postings(self, uint32_t old_leaf, uint32_t* child_leaf, vector[sid_t]& subs) noexcept nogil
    cdef void _rebuild_postings(self) noexcept nogil
    cdef void add(self, sid_t sid) noexcept nogil
    cdef void add_many(self, const sid_t* sids, size_t n) noexcept nogil
    cdef void remove(self, sid_t sid) noexcept nogil
    cdef void theta_changed(self, sid_t sid) noexcept nogil
    cdef size_t memory(self) noexcept nogil
    cdef void _own_text(self, sid_t sid, int pos, PEntryC* e) noexcept nogil
