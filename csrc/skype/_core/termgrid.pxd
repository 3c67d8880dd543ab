# Shared per-cell term counts for the terms kind: 2D prefix sums over a uniform grid, one table
# per frequent term, so that a rectangle's cell-aligned cover counts a term in O(1).
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, uint32_t, uint64_t
from skype._core.types cimport term_t, RectC, MsgTermC
from skype._core.querywindow cimport QueryWindow


cdef struct CellRangeC:            # the grid cells a rectangle meets: [x0, x1] x [y0, y1]
    uint32_t x0
    uint32_t y0
    uint32_t x1
    uint32_t y1


cdef class TermGrid:
    cdef QueryWindow qw
    cdef double minx, miny, scale_x, scale_y
    cdef uint32_t cells                    # per side
    cdef uint32_t side                     # cells + 1: a table's row length
    cdef uint32_t create_at                # a term gets a table when its window count reaches this
    cdef uint32_t drop_below               # and loses it when the count falls below this
    cdef vector[int32_t] table_of          # by term: its table, -1 for none
    cdef vector[vector[uint32_t]] tables   # side * side prefix sums: [y + 1][x + 1] = messages in cells <= (x, y)
    cdef vector[int32_t] free_tables
    cdef vector[term_t] term_of            # by table: its term (0: free)
    cdef vector[uint32_t] count_of         # by table: its term's window count (0: free)
    cdef uint64_t built, dropped

    cdef uint32_t cell_x(self, double x) noexcept nogil
    cdef uint32_t cell_y(self, double y) noexcept nogil
    cdef CellRangeC c_cells(self, const RectC* r) noexcept nogil
    cdef void c_message(self, double x, double y, const MsgTermC* mt, uint32_t nterms, int delta) noexcept nogil
    cdef bint c_upper(self, term_t t, const CellRangeC* c, uint32_t* count) noexcept nogil
    cdef void _build(self, term_t t) noexcept nogil
    cdef void _add(self, vector[uint32_t]* tab, uint32_t cx, uint32_t cy, uint32_t delta) noexcept nogil
