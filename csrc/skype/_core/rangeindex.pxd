# Grid index of rectangle subscriptions with per-term posting lists (PS2Stream's GI2 shape).
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, RectC, MsgTermC


cdef packed struct PostC:          # a subscription in one grid cell of one term's list (8 bytes)
    uint32_t cell
    uint32_t slot                  # slot | POST_INSIDE | POST_IMPLIED

cdef enum:
    POST_INSIDE = 0x80000000       # the cell lies inside the rectangle: no location test
    POST_IMPLIED = 0x40000000      # holding the list's term satisfies the predicate (no AND)
    POST_SLOT = 0x3FFFFFFF


cdef struct SlotHotC:              # what a probe reads of a candidate (48 bytes, one cache line)
    uint64_t stamp                 # last probe that reached it
    int64_t ext_id
    RectC rect


cdef struct RectSubC:              # a registered subscription
    RectC rect
    int64_t ext_id
    uint32_t prog_pos              # its predicate in the program store (postfix codes)
    uint32_t prog_len
    uint32_t cover_pos             # its cover terms (shifted ids; none: ALL_TERM)
    uint32_t cover_len
    uint8_t alive
    uint8_t implied                # its postings carry POST_IMPLIED


cdef class RectSubIndex:
    cdef RectC bounds
    cdef uint32_t grid                  # cells per side
    cdef double inv_w, inv_h            # cells per unit of x and y
    cdef vector[RectSubC] subs          # by slot
    cdef vector[SlotHotC] hot           # by slot: stamp and id, dense for the hot loop
    cdef vector[uint32_t] free_slots
    cdef vector[vector[int64_t]] progs  # by slot: predicate program, then cover terms
    cdef vector[vector[PostC]] lists    # by term: postings sorted by (cell, slot) when clean
    cdef vector[uint8_t] dirty          # by term: appended since the last sort
    cdef vector[vector[uint32_t]] dirs  # by term, long lists only: first posting of each cell
    cdef vector[vector[PostC]] tails    # by term: postings of grown rectangles, sorted, merged when long
    cdef uint64_t grown, merges
    cdef uint64_t probes
    cdef vector[uint8_t] stack
    cdef uint64_t postings, candidates

    cdef uint32_t cell_x(self, double x) noexcept nogil
    cdef uint32_t cell_y(self, double y) noexcept nogil
    cdef uint32_t c_add(self, int64_t ext_id, const RectC* r, const int64_t* prog, int plen,
                        const int64_t* cover, int ncover, bint implied) noexcept nogil
    cdef void c_remove(self, uint32_t slot) noexcept nogil
    cdef void c_grow(self, uint32_t slot, const RectC* r) noexcept nogil
    cdef void _merge_tail(self, term_t t) noexcept nogil
    cdef void _sort(self, term_t t) noexcept nogil
    cdef void c_probe(self, double x, double y, const MsgTermC* terms, int n,
                      vector[uint32_t]* out) noexcept nogil
    cdef void _probe_run(self, vector[PostC]* lst, size_t lo, size_t size, uint32_t cell, double x, double y,
                         const MsgTermC* terms, int n, vector[uint32_t]* out) noexcept nogil
