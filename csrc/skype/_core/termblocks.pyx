# cython: language_level=3
"""The continuous ``terms`` kind, design 3 (issue 36): lanes in blocks, shared rows, thresholds.

A ``terms`` result changes only when a term enters or leaves a subscription's top-k *set*, so the
work per message follows the few subscriptions whose set can change, not every subscription the
message falls in.

Structure (``termlanes.pyx``, the base class).  Each subscription is a *lane* of a *block* of 64:
lanes are grouped by the cell of their rectangle's centre (``centre_cells`` per side), so a
block's lanes overlap.  A block keeps its lanes' rectangles as arrays (one message is tested
against 64 of them at once), the union of their rectangles, and *rows*: for a term, 64 exact
counts (one per lane) and ``tracked``, ``member`` and ``reserve`` masks.  A uniform grid over
the space lists the blocks whose union meets each cell.

Keys rank terms as design 1/2 do (``termrank.pxd``): ``(UINT32_MAX - count) << 32 | label`` (count descending,
then name ascending).  Invariants, per lane ``i`` of block ``b``:

1. where ``i`` is tracked in a row, the row's count is ``i``'s exact count of that term;
2. its members (its top-k at its last re-rank) are tracked, and every member's key is below
   ``theta[i]``, every tracked non-member's key is at or above it; no member has a count of 0;
3. every untracked term's key is at or above ``bound[i]`` >= ``gate[i]`` >= ``theta[i]``
   (``UINT64_MAX``: every term with a count in the rectangle is tracked);
4. every tracked non-member with a count and outside the lane's *reserve* has a key at or above
   ``gate[i]`` (a full re-rank puts the terms ranked k+1 to ``gate_at`` in the reserve; an
   arrival or a newly tracked term whose key falls below the gate joins it).

So the members are the top-k (fewer when the rectangle holds fewer terms).

Events (``c_event``) move the counts of the lanes that hold the message and track its terms, and
note a lane only when a key *crosses* its threshold; an untracked arriving term is bounded once
per block by the count grid, then per lane (grid, then a bounded walk), and tracked when it
reaches the lane's gate.  The step's end (``c_flush``) re-ranks each noted lane alone: first
*light*, from its members and its reserve (by 2 and 4, the top k of those are the top-k when the
k-th ranks before the gate), else from all its rows, refilled from a count of its rectangle when
they do not prove its top-k; ``theta`` goes halfway between the k-th key and the next, and the
set's changes are emitted.  The full walk-through is in ``docs/queries.md`` ("Terms design 3").

Results are the members in the order of their current keys (counts read from the rows).  A row
keeps its term's label (refreshed by ``c_relabel``), so a re-rank makes keys from the rows it
reads alone; a light re-rank emits its changes in O(k): an entry is a candidate among the new
first k, a departure a former member whose bit is clear.
"""
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libcpp.algorithm cimport partial_sort
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memset
from skype._core.types cimport term_t, RectC, MsgTermC
from skype._core.cells cimport cell_of
from skype._core.termlanes cimport BlockRows, RowC, BlockC, LaneC, LANES
from skype._core.termrank cimport term_key as lane_key, key_count, need_count, emit_set_changes
from skype._core.rowmap cimport rowmap_find

cdef extern from *:
    int ctz64 "__builtin_ctzll"(unsigned long long) noexcept nogil

cdef extern from "<algorithm>" namespace "std" nogil:
    void nth_element[Iter](Iter first, Iter nth, Iter last) noexcept

cdef uint64_t NO_BOUND = 0xFFFFFFFFFFFFFFFFu
cdef uint32_t FROM_CAND = 0x80000000u          # a light re-rank's key of a candidate (not a member before)


cdef inline void emit_row(int64_t at, int64_t sub, term_t t, uint8_t entered, vector[int64_t]* out_at,
                          vector[int64_t]* out_sub, vector[int64_t]* out_entry,
                          vector[uint8_t]* out_entered) noexcept nogil:
    out_at.push_back(at)
    out_sub.push_back(sub)
    out_entry.push_back(<int64_t>t - 1)
    out_entered.push_back(entered)


cdef class TermBlocks(BlockRows):
    # ------------------------------------------------------------------ subscriptions
    cdef uint32_t c_add(self, int64_t ext_id, const RectC* r, uint32_t k) noexcept nogil:
        """A lane for the subscription in a block of its centre cell (a new block when all are
        full); its top-k from a count of its rectangle.  Returns its slot."""
        cdef double cx = (r.minx + r.maxx) * 0.5, cy = (r.miny + r.maxy) * 0.5
        cdef double fx = (cx - self.space.minx) * self.scale_x * self.centre_cells
        cdef double fy = (cy - self.space.miny) * self.scale_y * self.centre_cells
        cdef uint32_t centre = cell_of(fy, self.centre_cells) * self.centre_cells + cell_of(fx, self.centre_cells)
        cdef vector[uint32_t]* mine = &self.centre_blocks[centre]
        cdef uint32_t b = 0xFFFFFFFFu, i, slot, x0, x1, y0, y1, gx, gy, ox0 = 1, ox1 = 0, oy0 = 1, oy1 = 0
        cdef size_t j
        cdef BlockC* blk
        cdef bint fresh
        for j in range(mine.size()):
            if ~self.blocks[mine[0][j]].alive:
                b = mine[0][j]
                break
        fresh = b == 0xFFFFFFFFu
        if fresh:
            b = <uint32_t>self.blocks.size()
            self.blocks.resize(b + 1)
            self.rows.resize(b + 1)
            self.row_map.resize(b + 1)
            self.free_rows.resize(b + 1)
            self.lanes.resize(<size_t>(b + 1) * LANES)
            self.members.resize(<size_t>(b + 1) * LANES)
            self.reserve.resize(<size_t>(b + 1) * LANES)
            self.entering.resize(<size_t>(b + 1) * LANES)
            blk = &self.blocks[b]
            memset(blk, 0, sizeof(BlockC))
            blk.uni = r[0]
            blk.centre = centre
            mine.push_back(b)
        blk = &self.blocks[b]
        i = <uint32_t>ctz64(~blk.alive)
        slot = b * LANES + i
        if not fresh:                                  # the union's old index cells
            ox0 = self._cell(blk.uni.minx, self.space.minx, self.scale_x)
            ox1 = self._cell(blk.uni.maxx, self.space.minx, self.scale_x)
            oy0 = self._cell(blk.uni.miny, self.space.miny, self.scale_y)
            oy1 = self._cell(blk.uni.maxy, self.space.miny, self.scale_y)
            blk.uni.minx = min(blk.uni.minx, r.minx)
            blk.uni.miny = min(blk.uni.miny, r.miny)
            blk.uni.maxx = max(blk.uni.maxx, r.maxx)
            blk.uni.maxy = max(blk.uni.maxy, r.maxy)
        x0 = self._cell(blk.uni.minx, self.space.minx, self.scale_x)
        x1 = self._cell(blk.uni.maxx, self.space.minx, self.scale_x)
        y0 = self._cell(blk.uni.miny, self.space.miny, self.scale_y)
        y1 = self._cell(blk.uni.maxy, self.space.miny, self.scale_y)
        for gy in range(y0, y1 + 1):                   # listed in the cells the union gained
            for gx in range(x0, x1 + 1):
                if not (ox0 <= gx <= ox1 and oy0 <= gy <= oy1):
                    self.cell_blocks[gy * self.cells + gx].push_back(b)
        if self.grid is not None:
            blk.ucells = self.grid.c_cells(&blk.uni)
            self.lanes[slot].cells = self.grid.c_cells(r)
        blk.minx[i] = r.minx
        blk.miny[i] = r.miny
        blk.maxx[i] = r.maxx
        blk.maxy[i] = r.maxy
        blk.alive |= (<uint64_t>1) << i
        blk.bound[i] = NO_BOUND
        blk.theta[i] = 0
        blk.gate[i] = 0
        self.lanes[slot].rect = r[0]
        self.lanes[slot].ext_id = ext_id
        self.lanes[slot].k = max(k, 1)
        self.lanes[slot].gate_at = self.gate_factor * self.lanes[slot].k
        self.lanes[slot].fill = self.fill_factor * self.lanes[slot].k
        self.lanes[slot].stamp = 0
        self.lanes[slot].ntracked = 0
        self.members[slot].clear()
        self.reserve[slot].clear()
        self.live += 1
        self._refill(slot)
        self._rerank(slot, False, 0, NULL, NULL, NULL, NULL)       # registration emits nothing
        return slot

    cdef void c_remove(self, uint32_t slot) noexcept nogil:
        cdef uint32_t b = slot // LANES, i = slot % LANES, r
        cdef BlockC* blk = &self.blocks[b]
        cdef uint64_t bit = (<uint64_t>1) << i
        if not (blk.alive & bit):
            return
        for r in range(self.rows[b].size()):
            if self.rows[b][r].tracked & bit:
                self._untrack(b, i, r)
        blk.alive &= ~bit
        blk.theta[i] = 0
        blk.gate[i] = 0
        blk.bound[i] = NO_BOUND
        blk.minx[i] = 1.0                              # no point is inside an empty rectangle
        blk.maxx[i] = 0.0
        self.members[slot].clear()
        self.members[slot].shrink_to_fit()
        self.reserve[slot].clear()
        self.reserve[slot].shrink_to_fit()
        self.live -= 1
        self._gate_max(b)

    # ------------------------------------------------------------------ events
    cdef void c_event(self, double x, double y, const MsgTermC* mt, uint32_t nterms, int delta) noexcept nogil:
        """A message arrives (+1: in the window and the grid already) or expires (-1: still in
        them): the rows of the blocks it falls in move, crossed lanes are noted."""
        cdef uint32_t cx = self._cell(x, self.space.minx, self.scale_x)
        cdef uint32_t cy = self._cell(y, self.space.miny, self.scale_y)
        cdef vector[uint32_t]* bl = &self.cell_blocks[cy * self.cells + cx]
        cdef size_t j
        cdef uint32_t b, i, ti, lab
        cdef uint64_t c, tracked, mm, bit, key
        cdef int64_t r
        cdef BlockC* blk
        cdef RowC* row
        cdef term_t t
        self.events += 1
        for j in range(bl.size()):
            b = bl[0][j]
            blk = &self.blocks[b]
            if x < blk.uni.minx or x > blk.uni.maxx or y < blk.uni.miny or y > blk.uni.maxy:
                continue
            c = 0
            for i in range(LANES):
                c |= (<uint64_t>((blk.minx[i] <= x) & (x <= blk.maxx[i]) & (blk.miny[i] <= y)
                                 & (y <= blk.maxy[i]))) << i
            c &= blk.alive
            if not c:
                continue
            self.block_visits += 1
            for ti in range(1, nterms):
                t = mt[ti].term
                tracked = 0
                r = rowmap_find(&self.row_map[b], t)
                if r >= 0:
                    row = &self.rows[b][r]
                    tracked = c & row.tracked
                    if tracked:
                        self.row_updates += 1
                        lab = row.label
                        mm = tracked
                        while mm:
                            i = <uint32_t>ctz64(mm)
                            mm &= mm - 1
                            bit = (<uint64_t>1) << i
                            if delta > 0:
                                row.count[i] += 1
                                if not (row.member & bit):
                                    key = lane_key(row.count[i], lab)
                                    if key < blk.gate[i] and not (row.reserve & bit):
                                        self._reserve_add(b, i, <uint32_t>r)    # keeps the reserve's invariant
                                    if key < blk.theta[i]:
                                        self._cross(b * LANES + i, r)
                            else:
                                row.count[i] -= 1
                                if (row.member & bit) and (row.count[i] == 0
                                                           or lane_key(row.count[i], lab) >= blk.theta[i]):
                                    self._cross(b * LANES + i, -1)
                if delta > 0 and (c & ~tracked):
                    self._untracked(b, t, c & ~tracked)
                    blk = &self.blocks[b]

    cdef void _untracked(self, uint32_t b, term_t t, uint64_t u) noexcept nogil:
        """An arriving message of term t in the rectangles of lanes u, which do not track t."""
        cdef BlockC* blk = &self.blocks[b]
        cdef uint32_t lab = self.labels[0][t], ub, i, need, count, slot, r
        cdef bint table
        cdef uint64_t key, lkey, mm
        cdef LaneC* lane
        table = self.grid is not None and self.grid.c_upper(t, &blk.ucells, &ub)
        if not table:                                  # the window's count bounds it anywhere
            ub = self.qw.index.nodes[self.qw.index.root[t]].count
        key = lane_key(ub, lab)
        if key >= blk.gate_max:                        # reaches no lane's gate: bounds only
            self.block_bounded += 1
            for i in range(LANES):
                if (u >> i) & 1 and key < blk.bound[i]:
                    blk.bound[i] = key
            return
        mm = u
        while mm:
            i = <uint32_t>ctz64(mm)
            mm &= mm - 1
            slot = b * LANES + i
            lane = &self.lanes[slot]
            blk = &self.blocks[b]
            lkey = key                                 # the block's bound, or the lane's own
            if table:
                self.grid.c_upper(t, &lane.cells, &ub)
                lkey = lane_key(ub, lab)
            if lkey >= blk.gate[i]:
                self.lane_bounded += 1
                if lkey < blk.bound[i]:
                    blk.bound[i] = lkey
                continue
            if blk.bound[i] == NO_BOUND:               # every term with a count is tracked: t had none
                count = 1
            else:
                need = need_count(blk.gate[i], lab)
                self.walks += 1
                count = self.qw.c_count_bounded(t, &lane.rect, need)
                if count < need:                       # a bound that does not reach the gate
                    self.walks_bounded += 1
                    lkey = lane_key(count, lab)
                    if lkey < blk.bound[i]:
                        blk.bound[i] = lkey
                    continue
            self.tracked_new += 1
            r = self._track(b, i, t, count)
            blk = &self.blocks[b]
            lkey = lane_key(count, lab)
            if lkey < blk.gate[i]:
                self._reserve_add(b, i, r)
            if lkey < blk.theta[i]:
                self._cross(slot, r)

    # ------------------------------------------------------------------ re-ranks
    cdef void _refill(self, uint32_t slot) noexcept nogil:
        """Lane ``slot`` tracks the top ``fill`` terms of a count of its rectangle's messages;
        ``bound`` is the next key."""
        cdef uint32_t b = slot // LANES, i = slot % LANES, r
        cdef LaneC* lane = &self.lanes[slot]
        cdef uint64_t bit = (<uint64_t>1) << i
        cdef size_t j, n
        cdef term_t t
        for r in range(self.rows[b].size()):
            if self.rows[b][r].tracked & bit:
                self._untrack(b, i, r)
        self.touched.clear()
        self.qw.c_region_counts(&lane.rect, 0.0, 0.0, &self.counts, &self.touched)
        self.tkeys.clear()
        for j in range(self.touched.size()):
            t = self.touched[j]
            self.tkeys.push_back(pair[uint64_t, term_t](lane_key(self.counts[t], self.labels[0][t]), t))
            self.counts[t] = 0
        n = min(self.tkeys.size(), <size_t>lane.fill + 1)
        partial_sort(self.tkeys.begin(), self.tkeys.begin() + n, self.tkeys.end())
        for j in range(min(n, <size_t>lane.fill)):
            t = self.tkeys[j].second
            self._track(b, i, t, key_count(self.tkeys[j].first))
        self.blocks[b].bound[i] = self.tkeys[lane.fill].first if self.tkeys.size() > lane.fill else NO_BOUND
        self.refills += 1

    cdef void _rerank(self, uint32_t slot, bint emit, int64_t at, vector[int64_t]* out_at,
                      vector[int64_t]* out_sub, vector[int64_t]* out_entry,
                      vector[uint8_t]* out_entered) noexcept nogil:
        """Lane ``slot``'s members and threshold from its rows (refilled first when they do not
        prove its top-k); with ``emit`` the terms that entered and left since its last re-rank."""
        cdef uint32_t b = slot // LANES, i = slot % LANES, r, k = self.lanes[slot].k
        cdef uint32_t fill = self.lanes[slot].fill, gate_at = self.lanes[slot].gate_at
        cdef uint64_t bit = (<uint64_t>1) << i, nxt, kth, bound
        cdef size_t j, n
        cdef RowC* row
        cdef vector[uint32_t]* mem = &self.members[slot]
        cdef int attempt
        self.reranks += 1
        self.before.clear()                            # its terms now (a refill may reuse their rows)
        for j in range(mem.size()):
            self.before.push_back(self.rows[b][mem[0][j]].term)
        for attempt in range(2):
            self.keys.clear()
            self.reserve[slot].clear()
            for r in range(self.rows[b].size()):
                row = &self.rows[b][r]
                if row.tracked & bit:
                    row.member &= ~bit
                    row.reserve &= ~bit
                    if row.count[i] == 0:              # a term without a count needs no tracking
                        self._untrack(b, i, r)
                    else:
                        self.keys.push_back(pair[uint64_t, uint32_t](lane_key(row.count[i],
                                                                              row.label), r))
            n = self.keys.size()
            if n > <size_t>fill + k:                   # untrack the worst: their keys bound the rest
                nth_element(self.keys.begin(), self.keys.begin() + fill + k, self.keys.end())
                for j in range(fill + k, n):
                    if self.keys[j].first < self.blocks[b].bound[i]:
                        self.blocks[b].bound[i] = self.keys[j].first
                    self._untrack(b, i, self.keys[j].second)
                self.keys.resize(fill + k)
                n = fill + k
            if n > gate_at:                            # keys[gate_at]: the gate's place
                nth_element(self.keys.begin(), self.keys.begin() + gate_at, self.keys.end())
            partial_sort(self.keys.begin(), self.keys.begin() + min(n, <size_t>k + 1),
                         self.keys.begin() + min(n, <size_t>gate_at))
            bound = self.blocks[b].bound[i]
            if bound == NO_BOUND or (n >= k and self.keys[k - 1].first < bound) or attempt == 1:
                break
            self._refill(slot)
        n = self.keys.size()
        bound = self.blocks[b].bound[i]
        if n > k or (n == k and bound != NO_BOUND):    # halfway between the k-th key and the next
            kth = self.keys[k - 1].first
            nxt = min(self.keys[k].first, bound) if n > k else bound
            self.blocks[b].theta[i] = kth + (nxt - kth + 1) // 2
        else:                                          # every term is tracked and a member
            self.blocks[b].theta[i] = lane_key(0, 0)   # any term with a count enters
        # an arriving untracked term is bounded while its key stays at or above the gate
        self.blocks[b].gate[i] = min(self.keys[gate_at].first, bound) if n > gate_at else bound
        mem.clear()
        self.after.clear()
        for j in range(min(n, <size_t>k)):
            row = &self.rows[b][self.keys[j].second]
            row.member |= bit
            mem.push_back(self.keys[j].second)
            self.after.push_back(row.term)
        for j in range(k, min(n, <size_t>gate_at)):   # the next terms, all below the gate
            self._reserve_add(b, i, self.keys[j].second)
        self._gate_max(b)
        if emit:
            emit_set_changes(&self.after, &self.before, at, self.lanes[slot].ext_id, out_at, out_sub, out_entry,
                             out_entered)

    cdef bint _rerank_light(self, uint32_t slot, int64_t at, vector[int64_t]* out_at,
                            vector[int64_t]* out_sub, vector[int64_t]* out_entry,
                            vector[uint8_t]* out_entered) noexcept nogil:
        """The light re-rank of a crossed lane: its new top-k is the top k of its members and
        candidates below a limit that every other term ranks at or after.  When its crossings were
        all entries (non-members falling below ``theta``), the candidates are those entries and
        the limit is ``theta``; when a member fell, they are its reserve (those with a count) and
        the limit is the gate (by invariants 3 and 4).  Proven when the k-th ranks before the
        limit: ``theta`` goes halfway between the k-th key and the next (or the limit); the gate
        and bound stay; members leave the reserve and the other candidates below the gate join
        it.  False when not proven (or fewer than k members): the full re-rank follows, which
        resets every member and reserve bit of the lane.  Also False when the lane tracks more
        than ``fill + 2k`` terms (light re-ranks never untrack): the full one keeps ``fill + k``."""
        cdef uint32_t b = slot // LANES, i = slot % LANES, k = self.lanes[slot].k, r
        cdef uint64_t bit = (<uint64_t>1) << i, kth, nxt, gate = self.blocks[b].gate[i], limit
        cdef vector[uint32_t]* mem = &self.members[slot]
        cdef vector[uint32_t]* res = &self.reserve[slot]
        cdef vector[uint32_t]* cand = &self.entering[slot]
        cdef size_t j, n, q
        cdef RowC* row
        if mem.size() < k or self.lanes[slot].ntracked > self.lanes[slot].fill + 2 * k:
            return False                               # (the full re-rank bounds the terms it tracks)
        limit = self.blocks[b].theta[i]
        if self.lanes[slot].fell:                      # from the reserve: its bits set again below
            limit = gate
            cand = res
            for j in range(res.size()):
                self.rows[b][res[0][j]].reserve &= ~bit
        self.keys.clear()
        for j in range(mem.size()):
            r = mem[0][j]
            row = &self.rows[b][r]
            row.member &= ~bit
            if row.count[i]:
                self.keys.push_back(pair[uint64_t, uint32_t](lane_key(row.count[i], row.label), r))
        for j in range(cand.size()):
            r = cand[0][j]
            row = &self.rows[b][r]
            if row.count[i] and row.tracked & bit and not (row.member & bit):
                row.member |= bit                      # marks it taken (cleared below)
                self.keys.push_back(pair[uint64_t, uint32_t](lane_key(row.count[i], row.label), r | FROM_CAND))
        if self.lanes[slot].fell:
            res.clear()
        n = self.keys.size()
        for j in range(n):
            self.rows[b][self.keys[j].second & ~FROM_CAND].member &= ~bit
        if n < k:
            return False
        partial_sort(self.keys.begin(), self.keys.begin() + min(n, <size_t>k + 1), self.keys.end())
        kth = self.keys[k - 1].first
        nxt = min(self.keys[k].first, limit) if n > k else limit
        if kth >= nxt:
            return False
        self.blocks[b].theta[i] = kth + (nxt - kth + 1) // 2
        self.before_rows.swap(mem[0])                  # the members before, in their order
        mem.clear()
        for j in range(k):
            r = self.keys[j].second & ~FROM_CAND
            row = &self.rows[b][r]
            row.member |= bit
            mem.push_back(r)
            if row.reserve & bit:                      # an entry out of the reserve
                row.reserve &= ~bit
                for q in range(res.size()):
                    if res[0][q] == r:
                        res[0][q] = res.back()
                        res.pop_back()
                        break
        for j in range(k, n):
            r = self.keys[j].second & ~FROM_CAND
            if self.keys[j].first < gate and not (self.rows[b][r].reserve & bit):
                self._reserve_add(b, i, r)
        if self.lanes[slot].fell:
            self.light_falls += 1
        self.light_reranks += 1
        # the set's changes in O(k), in emit_set_changes' order: the entries (a candidate among the
        # first k: not a member before) in rank order, then the members before whose bit is now clear
        for j in range(k):
            if self.keys[j].second & FROM_CAND:
                emit_row(at, self.lanes[slot].ext_id, self.rows[b][self.keys[j].second & ~FROM_CAND].term, 1,
                         out_at, out_sub, out_entry, out_entered)
        for j in range(self.before_rows.size()):
            row = &self.rows[b][self.before_rows[j]]
            if not (row.member & bit):
                emit_row(at, self.lanes[slot].ext_id, row.term, 0, out_at, out_sub, out_entry, out_entered)
        return True

    cdef void c_flush(self, int64_t at, vector[int64_t]* out_at, vector[int64_t]* out_sub,
                      vector[int64_t]* out_entry, vector[uint8_t]* out_entered) noexcept nogil:
        """The step's end: each crossed lane re-ranked alone, its changes emitted."""
        cdef size_t j
        cdef uint32_t slot
        for j in range(self.crossed.size()):
            slot = self.crossed[j]
            if not self.blocks[slot // LANES].alive & ((<uint64_t>1) << (slot % LANES)):
                continue                               # unsubscribed in this step
            if not self._rerank_light(slot, at, out_at, out_sub, out_entry, out_entered):
                self._rerank(slot, True, at, out_at, out_sub, out_entry, out_entered)
            self.entering[slot].clear()
        self.crossed.clear()
        self.step += 1

    cdef void c_relabel(self) noexcept nogil:
        """Labels changed (their order did not): every row's label, every lane's bound and
        threshold anew."""
        cdef size_t s, b, r
        for b in range(self.rows.size()):
            for r in range(self.rows[b].size()):
                if self.rows[b][r].term:
                    self.rows[b][r].label = self.labels[0][self.rows[b][r].term]
        for s in range(self.lanes.size()):
            if self.blocks[s // LANES].alive & ((<uint64_t>1) << (s % LANES)):
                self._refill(<uint32_t>s)
                self._rerank(<uint32_t>s, False, 0, NULL, NULL, NULL, NULL)

    def stats(self):
        cdef size_t b, rows = 0
        for b in range(self.rows.size()):
            rows += self.rows[b].size() - self.free_rows[b].size()
        return {"design": "blocks", "blocks": self.blocks.size(), "rows": rows, "events": self.events,
                "block_visits": self.block_visits, "row_updates": self.row_updates,
                "crossings": self.crossings, "reranks": self.reranks, "light_reranks": self.light_reranks,
                "light_falls": self.light_falls,
                "refills": self.refills,
                "walks": self.walks, "walks_bounded": self.walks_bounded,
                "block_bounded": self.block_bounded, "lane_bounded": self.lane_bounded,
                "tracked_new": self.tracked_new, "bytes": self.memory_bytes()}
