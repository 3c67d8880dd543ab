# Registration by search: what a search of a static per-term index of the window needs (regsearch.pyx).
cimport cython
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint16_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, seq_t, RectC, SubTermC
from skype._core.window cimport WindowStore
from skype._core.subindex cimport SubTable, SubHotC
from skype._core.reevaluation cimport RankedC
from skype._core.regmasks cimport TermBitsC


cdef struct SEntryC:             # a window message in a term's list (32 bytes; its mask: masks[p])
    double w                     # its weight for the term (exact)
    double x                     # its location (exact)
    double y
    uint32_t seq_lo              # low 32 bits of its seq


cdef struct SBoxC:               # bounds of a group of entries: exact bounding box and max weight
    RectC r
    double maxw


cdef struct STermC:              # one term's list: entries [first, stop), its groups [group0, group0 + ngroups)
    uint64_t first
    uint64_t stop
    uint32_t group0
    uint32_t ngroups
    uint64_t slice0              # its masks bit-sliced: slices[slice0 + b * words + w] (NO_SLICE: none)


cdef struct SItemC:              # best-first queue item (max-heap on key)
    double key                   # upper bound of the scores of the item's messages
    uint32_t pos                 # a group of the layout, or an entry (level LEVEL_ENTRY)
    uint16_t qterm               # the query term (index into the subscription's terms)
    uint16_t level               # the layout's levels; entries: LEVEL_ENTRY


cdef enum:
    LEVEL_ENTRY = 3              # an item that is one entry (an entry item)


cdef struct ScoredC:             # a scored message in the top-C heap (worst at the root)
    double score
    seq_t seq


cdef class RegistrationIndex:          # no layout of its own: RegistrationTree (regtree.pyx) extends it
    cdef WindowStore window
    cdef double max_dist
    cdef vector[int32_t] term_slot           # term id -> index into terms, -1: not indexed
    cdef vector[STermC] terms
    cdef vector[SEntryC] entries
    # per entry (masks[p]: entries[p]'s message), a Bloom filter of its terms (term_bits)
    cdef vector[TermBitsC] masks
    cdef vector[TermBitsC] msg_masks         # per window message (seq - oldest), while building
    cdef vector[uint64_t] slices             # per scanned term: 128 rows (a mask bit each) of a bit per entry
    cdef vector[uint64_t] cand               # the entry items of one query term (_scan_entry_items)
    cdef vector[int] q_pos                   # per query term: its mask bits' positions (4 a term, -1: none)
    # query state
    cdef vector[SItemC] queue
    cdef vector[ScoredC] best
    cdef vector[TermBitsC] q_bits            # per query term: its bits (term_bits)
    cdef vector[TermBitsC] q_before, q_after  # per query term: union of the earlier / later terms' bits
    # counters
    cdef uint64_t n_searches, n_items, n_blocks, n_scored, n_fetched, n_pruned_entries, n_entry_items
    cdef uint64_t n_entry_scans             # list entries covered by the entry-item scans
    cdef uint64_t n_fetched_alone           # window reads of a message holding no term of s but the searched one
    cdef double build_ns

    @cython.final
    cdef void _collect(self, SubTable table, const sid_t* sids, size_t n) noexcept nogil

    @cython.final
    cdef void _prepare(self, const SubTermC* terms, int nq) noexcept nogil

    @cython.final
    cdef void _gather_masks(self) noexcept nogil

    @cython.final
    cdef void _scan_entry_items(self, int qi, int nq, const STermC* st) noexcept nogil

    @cython.final
    cdef int32_t _slot(self, term_t t) noexcept nogil

    @cython.final
    cdef void _score_entry_item(self, const SubHotC* h, const SubTermC* terms, const SItemC* it,
                                uint32_t cap) noexcept nogil

    @cython.final
    cdef void _score_block(self, const SubHotC* h, const SubTermC* terms, uint32_t qi,
                           uint64_t p0, uint64_t p1, uint32_t cap) noexcept nogil

    @cython.final
    cdef void _emit(self, vector[RankedC]* out) noexcept nogil

    @cython.final
    cdef double _box_bound(self, const SubHotC* h, const SubTermC* terms, uint32_t qi,
                           const SBoxC* box) noexcept nogil

    @cython.final
    cdef void _push(self, double key, uint32_t pos, uint32_t qterm, uint32_t level) noexcept nogil

    @cython.final
    cdef SItemC _pop(self) noexcept nogil

    @cython.final
    cdef void _score_message(self, const SubHotC* h, const SubTermC* terms, uint32_t qi, seq_t seq,
                             uint32_t cap) noexcept nogil

    @cython.final
    cdef void _offer(self, uint32_t cap, double score, seq_t seq) noexcept nogil


cdef inline void box_start(SBoxC* b, const SEntryC* e) noexcept nogil:
    b.r.minx = e.x
    b.r.maxx = e.x
    b.r.miny = e.y
    b.r.maxy = e.y
    b.maxw = e.w


cdef inline void box_widen(SBoxC* b, double minx, double miny, double maxx, double maxy, double w) noexcept nogil:
    if minx < b.r.minx:
        b.r.minx = minx
    if maxx > b.r.maxx:
        b.r.maxx = maxx
    if miny < b.r.miny:
        b.r.miny = miny
    if maxy > b.r.maxy:
        b.r.maxy = maxy
    if w > b.maxw:
        b.maxw = w
