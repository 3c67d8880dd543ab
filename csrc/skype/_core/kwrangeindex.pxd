# Range subscriptions keyword first (the range kind's index): per-term grids of records.
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, RectC, MsgTermC

cdef struct KwRecC:               # a range subscription in one cell of one term's grid (16 bytes)
    int64_t ext_id
    uint32_t slot                  # slot | KW_INSIDE | KW_NONE | KW_EXPR | KW_ONE | KW_POOL
    uint32_t chk                   # KW_ONE: the check term; KW_POOL: its offset in the term's pool

cdef enum:
    KW_INSIDE = 0x80000000         # the cell lies inside the rectangle: no location test
    KW_NONE = 0x40000000           # accept when the message holds NONE of the check terms (else: all)
    KW_EXPR = 0x20000000           # then the predicate program too
    KW_ONE = 0x10000000            # one check term, in chk
    KW_POOL = 0x08000000           # several: pool[chk] is their count, the terms follow
    KW_SLOT = 0x07FFFFFF


cdef struct KwGridC:               # one term's grid over the bounding box of its rectangles
    RectC box
    double inv_w, inv_h            # cells per unit of x and y
    uint32_t gx, gy                # cells per side
    uint8_t dirty                  # members changed since the last build


cdef class KeywordRangeIndex:
    cdef vector[RectC] rects            # by slot
    cdef vector[int64_t] ext_ids        # by slot
    cdef vector[vector[int64_t]] progs  # by slot: predicate program, then cover terms
    cdef vector[uint32_t] plens         # by slot: program length
    cdef vector[uint32_t] ncovers       # by slot: cover terms given (0: no predicate)
    cdef vector[vector[uint32_t]] checks  # by slot: sorted check terms (all: the others; else the cover)
    cdef vector[uint8_t] modes          # by slot: KW_NONE / KW_EXPR bits >> 24, 0 for all
    cdef vector[uint8_t] alive          # by slot
    cdef vector[uint32_t] free_slots
    cdef vector[vector[uint32_t]] members   # by term: slots posted under it
    cdef vector[KwGridC] grids          # by term
    cdef vector[vector[KwRecC]] recs    # by term: records, grouped by cell
    cdef vector[vector[uint32_t]] starts    # by term: first record of each cell (gx * gy + 1)
    cdef vector[vector[uint32_t]] pools     # by term: check terms of its records with several
    cdef vector[uint8_t] mark           # by term: held by the message being probed
    cdef vector[uint8_t] stack
    cdef uint64_t records, candidates, builds

    cdef uint32_t c_add(self, int64_t ext_id, const RectC* r, const int64_t* prog, int plen,
                        const int64_t* cover, int ncover) noexcept nogil
    cdef void c_remove(self, uint32_t slot) noexcept nogil
    cdef void _build(self, term_t t) noexcept nogil
    cdef void _post(self, term_t t, uint32_t slot) noexcept nogil
    cdef void _unpost(self, term_t t, uint32_t slot) noexcept nogil
    cdef size_t c_probe_ids(self, double x, double y, const MsgTermC* terms, int n,
                            vector[int64_t]* out) noexcept nogil
