# The state of the terms kind's design 3 (termlanes.pyx): lanes in blocks of 64, a block's rows of
# exact counts and its map term -> row, each lane's keys and its top-k; TermBlocks (termblocks.pyx)
# runs the events and re-ranks over it.  A lane's reserve: tracked non-members kept at hand, so
# that every other tracked non-member with a count ranks at or after the lane's gate.
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, RectC
from skype._core.querywindow cimport QueryWindow
from skype._core.termgrid cimport TermGrid, CellRangeC


cdef enum:
    LANES = 64                     # subscriptions (lanes) per block


cdef struct RowC:                  # one term's exact counts for the lanes of a block that track it
    uint64_t tracked               # lanes whose count here is exact and maintained (first: a re-rank
    uint64_t member                # reads the masks of every row) / lanes with this term in their top-k
    uint64_t reserve               # lanes with this term in their reserve (tracked, not a member)
    term_t term                    # 0: a free row
    uint32_t label                 # its term's label (read by re-ranks without a lookup)
    uint32_t count[64]             # by lane (0 where not tracked)


cdef struct BlockC:                # 64 lanes, structure of arrays
    double minx[64]
    double miny[64]
    double maxx[64]
    double maxy[64]
    uint64_t theta[64]             # members' keys are below it, tracked non-members' at or above
    uint64_t gate[64]              # an untracked term is tracked below it (>= theta); reserve: see below
    uint64_t bound[64]             # no untracked term's key is below it (>= gate; UINT64_MAX: none has a count)
    RectC uni                      # the union of its lanes' rectangles (grows only)
    CellRangeC ucells              # the count grid's cells the union meets
    uint64_t alive                 # lanes holding a subscription
    uint64_t gate_max              # the largest gate of its live lanes
    uint32_t centre                # its cell of centres (the grid that groups lanes)


cdef struct LaneC:                 # a terms subscription: slot = block * 64 + lane
    RectC rect
    CellRangeC cells               # the count grid's cells its rectangle meets
    int64_t ext_id
    uint32_t k
    uint32_t gate_at               # its gate is the key of its gate_at-th tracked term at a re-rank (> k)
    uint32_t fill                  # terms tracked after a refill (>= gate_at)
    uint32_t ntracked              # terms it tracks (past fill + 2k: a full re-rank untracks the worst)
    uint64_t stamp                 # the step of its last threshold crossing
    uint8_t fell                   # a crossing in this step was a member's fall (not only entries)


cdef class BlockRows:
    cdef QueryWindow qw
    cdef TermGrid grid                     # the shared per-cell counts (None: window counts bound)
    cdef vector[uint32_t]* labels          # by term: order-preserving label (the owner's vector)
    cdef RectC space
    cdef uint32_t cells                    # the block index: cells per side
    cdef double scale_x, scale_y
    cdef uint32_t centre_cells             # the grouping of lanes: cells per side of their centres
    cdef vector[BlockC] blocks
    cdef vector[vector[RowC]] rows         # by block
    cdef vector[vector[uint64_t]] row_map  # by block: term -> row (rowmap.pxd)
    cdef vector[vector[uint32_t]] free_rows                # by block
    cdef vector[LaneC] lanes               # by slot
    cdef vector[vector[uint32_t]] members  # by slot: the rows of its top-k at its last re-rank (rank order)
    cdef vector[vector[uint32_t]] reserve  # by slot: the rows of its reserve
    cdef vector[vector[uint32_t]] cell_blocks     # by index cell: blocks whose union meets it
    cdef vector[vector[uint32_t]] centre_blocks   # by centre cell: its blocks
    cdef uint64_t step
    cdef vector[uint32_t] crossed          # slots whose threshold was crossed in this step
    cdef vector[vector[uint32_t]] entering  # by slot: rows of non-members that fell below theta in the step
    # scratch
    cdef vector[pair[uint64_t, uint32_t]] keys
    cdef vector[pair[uint64_t, term_t]] tkeys
    cdef vector[uint32_t] counts
    cdef vector[term_t] touched
    cdef vector[term_t] before, after      # a re-ranked lane's top-k terms before and after
    cdef vector[uint32_t] before_rows      # a light re-rank's members before (rows)
    # counters
    cdef uint64_t block_visits, row_updates, crossings, reranks, refills, walks, walks_bounded
    cdef uint64_t block_bounded, lane_bounded, tracked_new, events, live, light_reranks, light_falls
    cdef uint32_t gate_factor, fill_factor     # gate_at = gate_factor * k, fill = fill_factor * k

    cdef void c_set_grid(self, TermGrid grid)
    cdef uint32_t _cell(self, double v, double lo, double scale) noexcept nogil
    cdef uint32_t _track(self, uint32_t b, uint32_t i, term_t t, uint32_t count) noexcept nogil
    cdef void _untrack(self, uint32_t b, uint32_t i, uint32_t r) noexcept nogil
    cdef void _reserve_add(self, uint32_t b, uint32_t i, uint32_t r) noexcept nogil
    cdef void _cross(self, uint32_t slot, int64_t row) noexcept nogil
    cdef void _gate_max(self, uint32_t b) noexcept nogil
