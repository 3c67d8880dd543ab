# Subscription table and the subscription-index base class (the indexes: blockindex, igpt, ciq).
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libc.stdint cimport int32_t, uint16_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, ext_id_t, RectC, SubTermC, MsgTermC

cdef enum:
    SID_BITS = 26                # a slot (sid) has at most this many bits (IGPT packs the rest)


cdef struct CandC:               # a subscription whose buffer an arriving message enters
    sid_t sid
    double score


cdef struct CountersC:           # dissemination counters (totals over all messages)
    uint64_t messages
    uint64_t cells_visited       # leaves whose postings were examined (or whose cover cell was hit)
    uint64_t cells_pruned        # leaves skipped by cell pruning (Lemma 6)
    uint64_t groups_visited
    uint64_t groups_skipped      # alpha-groups skipped whole (Thm 5.3)
    uint64_t entries_cut         # group members cut by early termination (Thm 5.4)
    uint64_t entries_visited     # posting entries examined individually
    uint64_t entry_pruned        # first meetings pruned from the posting entry alone (Lemma 4, a_s, b_s)
    uint64_t prefix_pruned       # first meetings pruned by prefix filtering (Thm 5.1)
    uint64_t unseen_pruned       # pruned by the unseen-keywords bound (Thm 5.2)
    uint64_t candidates          # subscriptions verified with their exact score
    uint64_t admitted            # verified candidates that score >= theta
    uint64_t blocks_visited      # block index: blocks whose entries were examined
    uint64_t blocks_skipped      # block index: blocks skipped whole by their header bound
    uint64_t bands_skipped       # block index: alpha-bands skipped whole by their bound
    uint64_t revisits_skipped    # block index: entries of a subscription met under an earlier term


cdef struct SubHotC:              # what a visit of a posting entry reads, in one cache line (48 bytes)
    double x
    double y
    double alpha
    double theta                  # exact dissemination threshold (owned by the result buffer)
    uint32_t term_off             # first of its term records
    uint16_t nterms
    uint16_t alive
    uint32_t leaf                 # IGPT leaf holding the subscription
    int32_t k


cdef class SubTable:
    """Subscriptions addressed by slot (sid): the hot records, the term records (each
    subscription's run sorted by term id), and cold columns."""
    cdef vector[SubHotC] hot
    cdef vector[ext_id_t] ext_id
    cdef vector[double] theta_idx      # the value the index statistics reflect (<= theta)
    cdef vector[SubTermC] terms
    cdef vector[sid_t] free_sids
    cdef unordered_map[ext_id_t, sid_t] by_ext
    cdef uint64_t dead_terms
    cdef uint32_t live

    cdef sid_t add(self, ext_id_t ext_id, double x, double y, int32_t k, double alpha,
                   const term_t* terms, const double* w, int n) noexcept nogil
    cdef void remove(self, sid_t sid) noexcept nogil
    cdef void compact_terms(self) noexcept nogil
    cdef int term_pos(self, sid_t sid, term_t t) noexcept nogil


cdef class SubscriptionIndex:
    """Finds, for an arriving message, every subscription s with ST(s, m) >= theta_s."""
    cdef SubTable table
    cdef RectC bounds
    cdef double max_dist
    cdef CountersC ctr
    cdef vector[CandC] out             # candidates of the last disseminate() call
    cdef vector[CandC] batch_out       # disseminate_batch(): every message's candidates,
    cdef vector[size_t] batch_off      # message i's at [batch_off[i], batch_off[i + 1])

    cdef void add(self, sid_t sid) noexcept nogil
    cdef void add_many(self, const sid_t* sids, size_t n) noexcept nogil
    cdef void remove(self, sid_t sid) noexcept nogil
    cdef void theta_changed(self, sid_t sid) noexcept nogil
    cdef double replay_raise_at(self, double theta_idx) noexcept nogil
    cdef void _verify(self, sid_t sid, double x, double y, const MsgTermC* m, int n) noexcept nogil
    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
    cdef void disseminate_batch(self, const MsgTermC* terms, const size_t* offs, const double* xs,
                                const double* ys, size_t n) noexcept nogil
    cdef size_t memory(self) noexcept nogil
