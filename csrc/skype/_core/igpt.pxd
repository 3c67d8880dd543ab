# IGPT and IPT (igpt.pyx): the paper's quadtree subscription index with individual and group pruning.
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, RectC, MsgTermC
from skype._core.subindex cimport SubscriptionIndex


cdef struct CandStateC:           # a subscription met by the current message (8 bytes)
    uint32_t sid                  # hash-table key (EMPTY_SLOT when free)
    int32_t last                  # DECIDED once its fate for this message is known


cdef struct PendingC:             # a first meeting that survived the entry test (term batch)
    uint32_t sid
    uint32_t leaf


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


cdef class IGPTIndex(SubscriptionIndex):
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
    # per-message scratch
    cdef uint32_t stamp
    cdef bint walked
    cdef vector[uint32_t] leaf_stamp
    cdef vector[double] leaf_osb
    cdef vector[double] leaf_dout
    cdef vector[uint8_t] leaf_pruned
    cdef vector[CandStateC] cand           # open-addressing table of the message's candidates
    cdef uint32_t cand_bits                # the table has 2^cand_bits slots
    cdef vector[uint32_t] cand_slots       # occupied slots (cleared per message)
    cdef vector[PendingC] pending          # first meetings of the current term, visited together
    cdef double m_x, m_y               # the message's location
    cdef int m_n                       # its number of terms
    cdef const MsgTermC* m_msg         # its terms (valid during disseminate)
    cdef vector[double] m_wtsum        # per message position: suffix sum / max of weights
    cdef vector[double] m_maxwt
    cdef vector[int32_t] stack
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
    cdef void _ensure_scratch(self) noexcept nogil
    cdef CandStateC* _cand_find(self, sid_t sid) noexcept nogil
    cdef CandStateC* _cand_insert(self, sid_t sid) noexcept nogil
    cdef void _cand_clear(self) noexcept nogil
    cdef void _visit(self, sid_t sid, int j, term_t t, uint32_t leaf) noexcept nogil
    cdef void _walk(self, double x, double y) noexcept nogil
    cdef bint _leaf_open(self, uint32_t leaf, double x, double y) noexcept nogil
    cdef bint _cut(self, const PEntryC* e, double wts_m, double osb) noexcept nogil
    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
    cdef size_t memory(self) noexcept nogil
    cdef double _m_maxwt_after(self, int j) noexcept nogil
    cdef void _own_text(self, sid_t sid, int pos, PEntryC* e) noexcept nogil
    cdef void _member(self, const PEntryC* e, int j, term_t t, uint32_t leaf, double osb) noexcept nogil
    cdef void _visit_pending(self, int j, term_t t) noexcept nogil
