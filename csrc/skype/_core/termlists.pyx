# cython: language_level=3
"""Message index: one list per term, in arrival order, for best-first retrieval.

Structure.  For every term t, the window messages that contain t sit in a list in arrival order:
entry (seq, wq, sig, cx, cy) at a growing position (12 bytes), wq the message's weight for t in
1/65535ths rounded up (``weight_code``), sig its signature (bit ``entry_bit(u)`` of 16 set for each
term u of the message) and (cx, cy) the cell of its location in a fixed grid of CELLS x CELLS cells
over the engine's bounds (the first and last cell of each axis open-ended, so a cell always holds
the location).  Every
run of CHUNK = 64 consecutive positions has a header (the messages' bounding box rounded outward,
and the largest w), and every run of GROUP = 4096 positions has one too.  A window expires its
oldest message first, and the oldest message holding t heads t's list, so an expiry advances each
of its terms' heads by one: O(1) per term, no search, no rebalancing.  Headers are only ever
widened, so a header whose run lost messages to expiry still bounds the live ones.  Storage is
dropped a chunk at a time once the dead prefix is an eighth of the list (amortised O(1): a
compaction moves at most seven live entries per expired one), a full long list's storage grows
by a quarter rather than doubling, and a compaction that leaves more than a quarter of the
storage spare copies the entries to a block an eighth larger than them (so a steady list holds
about 1.3 times its live entries' bytes, where it held about twice), and an empty list is reset.

Retrieval.  ``query_start``/``query_next`` follow ``ranking.WindowRanking``: the groups of
entries are a term's groups, then chunks (bound from the header's box and largest w), then single
entries (bound from the entry's own w, the distance to its cell, whose edges are widened by a
billionth of the bounds' extent to cover the rounding of ``lo + i * side``, and its signature:
only the other query terms whose bit it holds can add to its text part, each at most
min(w(j, s), a w), their sum at most their norm; docs/engine.md proves it); an entry reached
through its designated term is read from the window and scored exactly, so a message is read
only once its entry's bound tops the heap.  At 65,536 cells a side the cell bound is within
1.5e-5 of MaxDist of the location's own, so it lets through few more entries than a float
location did, for a quarter less memory.  Unlike the quadtree, the lists
do not group entries by space, so a query reads more of them; in exchange, insertion and expiry
cost a few writes.
"""
from libcpp.vector cimport vector
from libc.stdint cimport uint16_t, uint32_t, uint64_t, UINT64_MAX
from skype._core.types cimport term_t, seq_t, RectC, SubTermC, MsgTermC
from skype._core.window cimport WindowStore, MsgC, win_get, win_terms
from libc.math cimport sqrt, floor, INFINITY
from skype._core.scoring cimport mindist, combine, round_up, round_down
from skype._core.ranking cimport HeapItemC, WindowRanking

cdef double BOUND_SLACK = 1e-12
cdef double CELLS = 65536.0             # grid cells a side (a cell index is a uint16)
cdef double EDGE_SLACK = 1e-9           # cell edges widened by this fraction of the extent
cdef size_t KEEP_CAPACITY = 1024        # an emptied list keeps at most this many entries' storage
cdef size_t GROW_SLOWLY = 1024          # a list this long grows by a quarter (shorter ones double)
cdef size_t SPARE_MIN = 64              # a compaction keeps at most a quarter + this many spare slots

cdef bint use_signatures = True         # new TermLists bound entries with their signatures


def set_entry_signatures(bint on):
    """Whether TermLists made from now on bound an entry with its signature (``on``, the default)
    or with the query's other terms alone (the bound before signatures; for paired benches)."""
    global use_signatures
    use_signatures = on


cdef enum:                              # heap item tags (HeapItemC.node)
    ITEM_GROUP = 1
    ITEM_CHUNK = 2
    ITEM_ENTRY = 3


cdef inline void header_start(ChunkC* h, const MsgC* m, float w) noexcept nogil:
    h.minx = round_down(m.x)
    h.maxx = round_up(m.x)
    h.miny = round_down(m.y)
    h.maxy = round_up(m.y)
    h.maxw = w


cdef inline void header_widen(ChunkC* h, const MsgC* m, float w) noexcept nogil:
    cdef float lo, hi
    lo = round_down(m.x)
    hi = round_up(m.x)
    if lo < h.minx:
        h.minx = lo
    if hi > h.maxx:
        h.maxx = hi
    lo = round_down(m.y)
    hi = round_up(m.y)
    if lo < h.miny:
        h.miny = lo
    if hi > h.maxy:
        h.maxy = hi
    if w > h.maxw:
        h.maxw = w


cdef inline void list_reset(TermListC* lst) noexcept nogil:
    cdef vector[LEntryC] none
    if lst.entries.capacity() > KEEP_CAPACITY:
        lst.entries.swap(none)
    lst.entries.clear()
    lst.chunks.clear()
    lst.groups.clear()
    lst.off = 0
    lst.head = 0
    lst.end = 0


cdef inline void list_compact(TermListC* lst) noexcept nogil:
    """Drop the whole chunks before head from storage; storage with more than a quarter (and
    SPARE_MIN) spare after that is copied to a block an eighth larger than the entries kept."""
    cdef uint64_t new_off = lst.head - lst.head % CHUNK
    cdef uint64_t drop = new_off - lst.off
    cdef uint64_t drop_groups = new_off // GROUP - lst.off // GROUP
    cdef size_t keep = lst.entries.size() - drop
    cdef vector[LEntryC] fit
    if lst.entries.capacity() > keep + keep // 4 + SPARE_MIN:
        fit.reserve(keep + keep // 8 + 8)
        fit.insert(fit.end(), lst.entries.begin() + drop, lst.entries.end())
        lst.entries.swap(fit)
    else:
        lst.entries.erase(lst.entries.begin(), lst.entries.begin() + drop)
    lst.chunks.erase(lst.chunks.begin(), lst.chunks.begin() + drop // CHUNK)
    lst.groups.erase(lst.groups.begin(), lst.groups.begin() + drop_groups)
    lst.off = new_off


cdef class TermLists(WindowRanking):
    def __cinit__(self, WindowStore window, double max_dist, tuple bounds):
        minx, miny, maxx, maxy = bounds
        self.window = window
        self.max_dist = max_dist
        self.grid_x = minx
        self.grid_y = miny
        self.cell_w = (maxx - minx) / CELLS if maxx > minx else 1.0
        self.cell_h = (maxy - miny) / CELLS if maxy > miny else 1.0
        self.inv_w = 1.0 / self.cell_w
        self.inv_h = 1.0 / self.cell_h
        self.cell_slack = EDGE_SLACK * (max(maxx - minx, maxy - miny) + 1.0)
        self.entry_count = 0
        self.live_lists = 0
        self.total_queries = 0
        self.total_work = 0
        self.signatures = use_signatures

    # ------------------------------------------------------------------ updates
    cdef void insert(self, seq_t seq) noexcept nogil:
        cdef MsgC* m = win_get(self.window, seq)
        cdef const MsgTermC* terms = win_terms(self.window, m)
        cdef uint32_t j
        cdef term_t t
        cdef TermListC* lst
        cdef LEntryC e
        cdef ChunkC h
        cdef float w
        e.seq_lo = <uint32_t>seq
        e.sig = 0
        for j in range(m.nterms):
            e.sig |= entry_bit(terms[j].term)
        e.cx = self._cell(m.x, self.grid_x, self.inv_w)
        e.cy = self._cell(m.y, self.grid_y, self.inv_h)
        for j in range(m.nterms):
            t = terms[j].term
            if t >= self.lists.size():
                self.lists.resize(t + 1)
            lst = &self.lists[t]
            if lst.head == lst.end:
                self.live_lists += 1
            w = round_up(terms[j].w)
            e.wq = weight_code(terms[j].w)
            if lst.entries.size() >= GROW_SLOWLY and lst.entries.size() == lst.entries.capacity():
                lst.entries.reserve(lst.entries.size() + lst.entries.size() // 4)   # a quarter, not double
            lst.entries.push_back(e)
            if lst.end % CHUNK == 0:
                header_start(&h, m, w)
                lst.chunks.push_back(h)
            else:
                header_widen(&lst.chunks[lst.chunks.size() - 1], m, w)
            if lst.end % GROUP == 0:
                header_start(&h, m, w)
                lst.groups.push_back(h)
            else:
                header_widen(&lst.groups[lst.groups.size() - 1], m, w)
            lst.end += 1
            self.entry_count += 1

    cdef void remove(self, seq_t seq) noexcept nogil:
        """Remove the window's oldest message (still in the window store): it heads its lists."""
        cdef MsgC* m = win_get(self.window, seq)
        cdef const MsgTermC* terms = win_terms(self.window, m)
        cdef uint32_t j
        cdef TermListC* lst
        for j in range(m.nterms):
            lst = &self.lists[terms[j].term]
            lst.head += 1
            self.entry_count -= 1
            if lst.head == lst.end:
                list_reset(lst)
                self.live_lists -= 1
            elif lst.head - lst.off >= CHUNK and 8 * (lst.head - lst.off) >= lst.end - lst.off:
                list_compact(lst)

    # ------------------------------------------------------------------ best-first retrieval
    cdef double _bound(self, const ChunkC* c, uint32_t qi, float w) noexcept nogil:
        cdef RectC r = RectC(c.minx, c.miny, c.maxx, c.maxy)
        return combine(self.q_alpha, 1.0 - mindist(&r, self.q_x, self.q_y) / self.max_dist,
                       self._text_bound(qi, w)) + BOUND_SLACK

    cdef uint16_t _cell(self, double v, double lo, double inv) noexcept nogil:
        cdef double c = floor((v - lo) * inv)
        if c < 0.0:
            return 0
        if c > CELLS - 1.0:
            return <uint16_t>(CELLS - 1.0)
        return <uint16_t>c

    cdef double _entry_bound(self, const LEntryC* e, uint32_t qi) noexcept nogil:
        cdef double lo, hi, dx = 0.0, dy = 0.0
        lo = self.grid_x + e.cx * self.cell_w - self.cell_slack if e.cx else -INFINITY
        hi = self.grid_x + (e.cx + 1.0) * self.cell_w + self.cell_slack if e.cx < CELLS - 1.0 else INFINITY
        if self.q_x < lo:
            dx = lo - self.q_x
        elif self.q_x > hi:
            dx = self.q_x - hi
        lo = self.grid_y + e.cy * self.cell_h - self.cell_slack if e.cy else -INFINITY
        hi = self.grid_y + (e.cy + 1.0) * self.cell_h + self.cell_slack if e.cy < CELLS - 1.0 else INFINITY
        if self.q_y < lo:
            dy = lo - self.q_y
        elif self.q_y > hi:
            dy = self.q_y - hi
        self.total_entry_bounds += 1
        return combine(self.q_alpha, 1.0 - sqrt(dx * dx + dy * dy) / self.max_dist,
                       self._entry_text_bound(e, qi)) + BOUND_SLACK

    cdef double _entry_text_bound(self, const LEntryC* e, uint32_t qi) noexcept nogil:
        """Upper bound of TSim for the entry's message if it is designated to query term qi: its
        own part a*w, plus for each other query term j whose bit the signature holds at most
        min(w(j, s), a*w) (its weight is at most 1, and at most the designated contribution),
        the sum capped by Cauchy-Schwarz over those terms alone; a term whose bit is missing is
        not in the message and adds nothing."""
        cdef double w = entry_weight(e.wq)
        cdef double a, mine, others = 0.0, rest2 = 0.0, o, tub
        cdef int j
        if not self.signatures:
            return self._text_bound(qi, w)
        a = self.q_terms[qi].w
        mine = a * w
        for j in range(self.q_n):
            if j == <int>qi or not (e.sig & self.q_bits[j]):
                continue
            o = self.q_terms[j].w
            others += o if o < mine else mine
            rest2 += o * o
        o = sqrt(rest2)
        tub = mine + (others if others < o else o)
        return tub if tub < 1.0 else 1.0

    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil:
        cdef int i
        cdef term_t t
        cdef TermListC* lst
        cdef uint64_t g, first, last
        self._begin(alpha, x, y, terms, n)
        self.q_bits.resize(n)
        for i in range(n):
            self.q_bits[i] = entry_bit(terms[i].term)
        for i in range(n):
            t = terms[i].term
            if t >= self.lists.size() or self.lists[t].head == self.lists[t].end:
                continue
            lst = &self.lists[t]
            first = lst.head // GROUP
            last = (lst.end - 1) // GROUP
            for g in range(first, last + 1):
                self._push(self._bound(&lst.groups[g - lst.off // GROUP], i, lst.groups[g - lst.off // GROUP].maxw),
                           UINT64_MAX, ITEM_GROUP, <uint32_t>(g - lst.off // GROUP), i)

    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil:
        cdef HeapItemC item
        cdef TermListC* lst
        cdef uint64_t first, last, c, p, chunk_base
        cdef const ChunkC* h
        cdef LEntryC e
        cdef seq_t oldest = self.window.oldest_seq
        while self.heap.size():
            item = self._pop()
            self.q_work += 1
            self.total_work += 1
            if item.node < 0:
                self.total_reported += 1
                seq[0] = item.tie
                score[0] = item.key
                return True
            lst = &self.lists[self.q_terms[item.qterm].term]
            if item.node == ITEM_GROUP:
                first = (item.cursor + lst.off // GROUP) * (GROUP // CHUNK)
                last = first + GROUP // CHUNK - 1
                if first < lst.head // CHUNK:
                    first = lst.head // CHUNK
                if last > (lst.end - 1) // CHUNK:
                    last = (lst.end - 1) // CHUNK
                chunk_base = lst.off // CHUNK
                self.total_pushes += last + 1 - first
                for c in range(first, last + 1):
                    h = &lst.chunks[c - chunk_base]
                    self._push(self._bound(h, item.qterm, h.maxw), UINT64_MAX, ITEM_CHUNK,
                               <uint32_t>(c - chunk_base), item.qterm)
            elif item.node == ITEM_CHUNK:
                first = (item.cursor + lst.off // CHUNK) * CHUNK
                last = first + CHUNK
                if first < lst.head:
                    first = lst.head
                if last > lst.end:
                    last = lst.end
                self.total_pushes += last - first
                for p in range(first, last):
                    self._push(self._entry_bound(&lst.entries[p - lst.off], item.qterm), UINT64_MAX, ITEM_ENTRY,
                               <uint32_t>(p - lst.off), item.qterm)
            else:
                e = lst.entries[item.cursor]
                self.total_reads += 1
                if self._offer(oldest + <uint32_t>(e.seq_lo - <uint32_t>oldest), item.qterm) != -INFINITY:
                    self.total_designated += 1
        return False

    # ------------------------------------------------------------------ Python access
    def memory_bytes(self):
        cdef size_t total = self.lists.capacity() * sizeof(TermListC)
        cdef size_t i
        for i in range(self.lists.size()):
            total += (self.lists[i].entries.capacity() * sizeof(LEntryC)
                      + (self.lists[i].chunks.capacity() + self.lists[i].groups.capacity()) * sizeof(ChunkC))
        return total

    def memory_parts(self):
        """Bytes by part: live entries, the dead prefix not yet dropped, unused capacity, chunk
        and group headers, the per-term records."""
        cdef size_t i, live = 0, dead = 0, spare = 0, headers = 0
        cdef TermListC* lst
        for i in range(self.lists.size()):
            lst = &self.lists[i]
            live += (lst.end - lst.head) * sizeof(LEntryC)
            dead += (lst.head - lst.off) * sizeof(LEntryC)
            spare += (lst.entries.capacity() - lst.entries.size()) * sizeof(LEntryC)
            headers += (lst.chunks.capacity() + lst.groups.capacity()) * sizeof(ChunkC)
        return {"entries": live, "dead_prefix": dead, "spare_capacity": spare, "headers": headers,
                "records": self.lists.capacity() * sizeof(TermListC)}

    def stats(self):
        return {"layout": "lists", "entries": self.entry_count, "terms": self.live_lists,
                "queries": self.total_queries, "query_work": self.total_work,
                "query_reads": self.total_reads, "query_reads_designated": self.total_designated,
                "query_reported": self.total_reported, "query_entry_bounds": self.total_entry_bounds,
                "query_pushes": self.total_pushes, "entry_signatures": bool(self.signatures)}
