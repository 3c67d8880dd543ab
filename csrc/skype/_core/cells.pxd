# The one cell mapping of the query kinds' uniform grids (rangeindex, kwrangeindex, termgrid,
# termblocks): monotone in the coordinate, so a point inside a rectangle lies in a cell between
# the cells of the rectangle's edges.
from libc.stdint cimport uint32_t


cdef inline uint32_t cell_of(double c, uint32_t cells) noexcept nogil:
    """The cell of a coordinate already scaled to cells, clamped to [0, cells - 1] (NaN: 0)."""
    if not (c > 0.0):
        return 0
    if c >= cells - 1:
        return cells - 1
    return <uint32_t>c
