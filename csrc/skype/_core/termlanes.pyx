# cython: language_level=3
"""The state of the ``terms`` kind's design 3 (issue 36): lanes in blocks of 64, shared rows.

:class:`BlockRows` holds what :class:`~skype._core.termblocks.TermBlocks` (its subclass: the
events, thresholds and re-ranks) works on.  A *lane* is a subscription; lanes are grouped in
blocks of 64 (slot = block * 64 + lane).  A block keeps its lanes' rectangles as arrays, their
union, and *rows*: for a term, 64 exact counts (one per lane) and three lane masks, ``tracked``
(the lane's count here is exact and maintained), ``member`` (the term is in the lane's top-k)
and ``reserve`` (a tracked non-member the lane keeps at hand: a light re-rank chooses the new
top-k among its members and its reserve).  A block's map term -> row is a sorted array
(``rowmap.pxd``); a row is freed when no lane tracks it.

Invariants kept here: a row's ``member`` and ``reserve`` lanes are among its ``tracked`` ones
and do not meet; a lane's reserve list holds exactly its rows with its ``reserve`` bit; a lane's
``members`` are its rows with its ``member`` bit, in rank order at its last re-rank.
The thresholds that make the members the top-k are termblocks.pyx's.
"""
import numpy as np
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libcpp.algorithm cimport sort as std_sort
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memset
from skype._core.types cimport term_t, RectC
from skype._core.querywindow cimport QueryWindow
from skype._core.termgrid cimport TermGrid
from skype._core.cells cimport cell_of
from skype._core.termrank cimport term_key as lane_key, key_count
from skype._core.rowmap cimport rowmap_find, rowmap_insert, rowmap_erase


cdef class BlockRows:
    def __cinit__(self, QueryWindow qw, double minx, double miny, double maxx, double maxy,
                  uint32_t cells=64, uint32_t centre_cells=64, uint32_t gate_factor=2, uint32_t fill_factor=4):
        self.qw = qw
        self.grid = None
        self.labels = NULL
        self.space = RectC(minx, miny, maxx, maxy)
        self.cells = max(cells, 1)
        self.centre_cells = max(centre_cells, 1)
        self.gate_factor = max(gate_factor, 1)
        self.fill_factor = max(fill_factor, self.gate_factor)
        self.scale_x = 1.0 / (maxx - minx) if maxx > minx else 0.0
        self.scale_y = 1.0 / (maxy - miny) if maxy > miny else 0.0
        self.cell_blocks.resize(<size_t>self.cells * self.cells)
        self.centre_blocks.resize(<size_t>self.centre_cells * self.centre_cells)
        self.step = 1

    cdef void c_set_grid(self, TermGrid grid):
        """The shared count grid (None: window counts bound untracked terms)."""
        cdef size_t b, s
        self.grid = grid
        for b in range(self.blocks.size()):
            if grid is not None:
                self.blocks[b].ucells = grid.c_cells(&self.blocks[b].uni)
        for s in range(self.lanes.size()):
            if grid is not None:
                self.lanes[s].cells = grid.c_cells(&self.lanes[s].rect)

    cdef uint32_t _cell(self, double v, double lo, double scale) noexcept nogil:
        return cell_of((v - lo) * scale * self.cells, self.cells)

    # ------------------------------------------------------------------ rows
    cdef uint32_t _track(self, uint32_t b, uint32_t i, term_t t, uint32_t count) noexcept nogil:
        """Lane i tracks term t with its exact count (a row for t made when the block has none)."""
        cdef int64_t found = rowmap_find(&self.row_map[b], t)
        cdef uint32_t r
        if found >= 0:
            r = <uint32_t>found
        else:
            if self.free_rows[b].size():
                r = self.free_rows[b].back()
                self.free_rows[b].pop_back()
            else:
                r = <uint32_t>self.rows[b].size()
                self.rows[b].resize(r + 1)
            memset(&self.rows[b][r], 0, sizeof(RowC))
            self.rows[b][r].term = t
            self.rows[b][r].label = self.labels[0][t]
            rowmap_insert(&self.row_map[b], t, r)
        if not (self.rows[b][r].tracked & ((<uint64_t>1) << i)):
            self.lanes[<size_t>b * LANES + i].ntracked += 1
        self.rows[b][r].count[i] = count
        self.rows[b][r].tracked |= (<uint64_t>1) << i
        return r

    cdef void _untrack(self, uint32_t b, uint32_t i, uint32_t r) noexcept nogil:
        cdef RowC* row = &self.rows[b][r]
        cdef uint64_t bit = (<uint64_t>1) << i
        if row.tracked & bit:
            self.lanes[<size_t>b * LANES + i].ntracked -= 1
        row.tracked &= ~bit
        row.member &= ~bit
        row.reserve &= ~bit
        row.count[i] = 0
        if row.tracked:
            return
        rowmap_erase(&self.row_map[b], row.term)     # no lane tracks it: the row is freed
        row.term = 0
        self.free_rows[b].push_back(r)

    cdef void _reserve_add(self, uint32_t b, uint32_t i, uint32_t r) noexcept nogil:
        """Lane i's tracked non-member of row r joins its reserve."""
        self.rows[b][r].reserve |= (<uint64_t>1) << i
        self.reserve[<size_t>b * LANES + i].push_back(r)

    cdef void _cross(self, uint32_t slot, int64_t row) noexcept nogil:
        """Lane ``slot``'s threshold was crossed: by the non-member of ``row`` falling below it,
        or (row -1) by a member reaching it: a re-rank at the step's end."""
        if self.lanes[slot].stamp != self.step:
            self.lanes[slot].stamp = self.step
            self.lanes[slot].fell = 0
            self.entering[slot].clear()
            self.crossed.push_back(slot)
        self.crossings += 1
        if row < 0:
            self.lanes[slot].fell = 1
        else:
            self.entering[slot].push_back(<uint32_t>row)

    cdef void _gate_max(self, uint32_t b) noexcept nogil:
        cdef BlockC* blk = &self.blocks[b]
        cdef uint64_t mx = 0
        cdef uint32_t i
        for i in range(LANES):
            if blk.gate[i] > mx:
                mx = blk.gate[i]
        blk.gate_max = mx

    # ------------------------------------------------------------------ Python access
    def result(self, uint32_t slot):
        """(vocabulary term ids, counts) of a lane's top-k, in rank order."""
        cdef uint32_t b = slot // LANES, i = slot % LANES
        cdef vector[pair[uint64_t, term_t]] order
        cdef vector[uint32_t]* mem = &self.members[slot]
        cdef size_t j
        cdef RowC* row
        for j in range(mem.size()):
            row = &self.rows[b][mem[0][j]]
            order.push_back(pair[uint64_t, term_t](lane_key(row.count[i], row.label), row.term))
        std_sort(order.begin(), order.end())
        ids = np.empty(order.size(), dtype=np.int64)
        counts = np.empty(order.size(), dtype=np.int64)
        for j in range(order.size()):
            ids[j] = <int64_t>order[j].second - 1
            counts[j] = key_count(order[j].first)
        return ids, counts

    def lane_state(self, uint32_t slot):
        """(theta, gate, bound, {vocabulary term id: count} of the terms it tracks, member ids,
        reserve ids): for tests of the invariants.  The reserve's ids come from its list, each
        checked against its row's ``reserve`` bit, and its count of tracked terms against its
        rows (a mismatch raises)."""
        cdef uint32_t b = slot // LANES, i = slot % LANES, r
        cdef uint64_t bit = (<uint64_t>1) << i
        tracked = {}
        flagged = set()
        for r in range(self.rows[b].size()):
            if self.rows[b][r].tracked & bit:
                tracked[<int64_t>self.rows[b][r].term - 1] = self.rows[b][r].count[i]
            if self.rows[b][r].reserve & bit:
                flagged.add(r)
        if len(tracked) != self.lanes[slot].ntracked:
            raise AssertionError(f"lane {slot}: tracks {len(tracked)} terms, counted {self.lanes[slot].ntracked}")
        listed = list(self.reserve[slot])
        if sorted(listed) != sorted(flagged):
            raise AssertionError(f"lane {slot}: reserve list {listed} against rows {sorted(flagged)}")
        return (self.blocks[b].theta[i], self.blocks[b].gate[i], self.blocks[b].bound[i], tracked,
                [<int64_t>self.rows[b][r].term - 1 for r in self.members[slot]],
                [<int64_t>self.rows[b][r].term - 1 for r in listed])

    def blocks_at(self, double x, double y):
        """The blocks listed in the index cell of (x, y), with their unions (for tests)."""
        cdef uint32_t cx = self._cell(x, self.space.minx, self.scale_x)
        cdef uint32_t cy = self._cell(y, self.space.miny, self.scale_y)
        return [(b, self.blocks[b].uni) for b in self.cell_blocks[cy * self.cells + cx]]

    def size(self):
        return self.live

    def memory_bytes(self):
        cdef size_t total = self.blocks.capacity() * sizeof(BlockC) + self.lanes.capacity() * sizeof(LaneC)
        cdef size_t b
        for b in range(self.rows.size()):
            total += self.rows[b].capacity() * sizeof(RowC) + self.row_map[b].capacity() * 8
            total += self.free_rows[b].capacity() * 4
        for b in range(self.members.size()):
            total += self.members[b].capacity() * 4 + self.reserve[b].capacity() * 4 + 48
        for b in range(self.cell_blocks.size()):
            total += self.cell_blocks[b].capacity() * 4 + 24
        return total
