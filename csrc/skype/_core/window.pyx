# cython: language_level=3
"""Window store: a FIFO ring of the messages in the sliding window.

Invariants:
* The window holds the dense run of arrival numbers ``oldest_seq .. oldest_seq + count - 1``;
  ``get(seq)`` is O(1) for any seq in that run.  Messages leave in arrival order only.
* Each message's terms (ascending ids) and unit weights sit contiguously in the term ring, a bip
  buffer of any capacity: ``term_pos`` is the slot of a message's first term.  The live terms run
  from the oldest message's slot ``term_head`` to ``term_tail``; when a block does not fit before
  the ring's end it starts at slot 0 (the skipped tail is dead space) and the live run is
  ``wrapped`` until its first message (``term_wrap_seq``) becomes the oldest.  When no free run
  is long enough, the live blocks are copied compactly into a ring with an eighth of headroom,
  so the ring stays near the window's term count (no power-of-two rounding) and kernels always
  get plain pointers.
* Duplicate detection (``contains_ids``) reads an open-addressing set (linear probing, deletion
  by backward shift, no tombstones) of ring slots keyed by the slot's external id, twice the
  ring's capacity so that its load stays at most a half: 8 bytes per slot, no node per message.
* The reverse map of spec §2 (which subscriptions hold a message in their result buffer) has
  two parts.  Admissions on arrival happen while the message is the newest, so they append to a
  FIFO holder ring: each message owns the block ``[hold_pos, hold_pos + hold_n)``, and blocks
  leave with their messages.  Holders added later (re-evaluations, and a bulk registration, which
  admits older messages: tens of holders for every window message at paper scale) go to a
  per-message ``extra`` list: a chain of 64-byte chunks (a link word, then 15 holders) in one pool
  (``extra_of`` maps a ring slot to its first chunk, 0 for none; ``extra_end`` to the word after
  its last holder).  The pool is one anonymous mapping grown by ``mremap`` (no copy) with a free
  list of chunks; an expiring message's chunks go back to the free list, and every
  ``SWEEP_AFTER`` bytes of freed chunks the pool's pages that hold no chunk in use are handed
  back to the OS.  So a list costs 4 bytes a holder, a link per 15 and half a chunk, with no
  allocator header and no slack that grows with the list, and nothing of it is copied as it grows.
  A buffer keeps no handle to its entry: when it drops the message (eviction, a re-evaluation,
  the subscription's removal) ``drop_holder_of`` finds sid among the message's holders (its
  block, then its chunks) and overwrites it with NO_HOLDER, so the live entries of a message
  are exactly the buffers holding it (the drops are queued and cleared in one prefetched pass
  after each arrival's admissions and before each expiry, bufstore.pyx).
* The messages below ``found_upto`` keep no holders at all: a bulk registration (engine.pyx)
  sets it to the next seq before it runs, so the tens of holders its subscriptions give every
  message then in the window are not stored (``drop_holder_of`` finds none); when such a
  message expires, the engine finds its holders by disseminating it
  again against the current thresholds, as without the reverse map.
* The message and holder rings double when full; holder positions are absolute (a slot is
  ``pos & (capacity - 1)``), so growth moves each live slot to its new slot and nothing is
  rebased.  The holder ring (the window's largest array: 4 bytes for each of ~50 admissions a
  message at paper scale) grows in place: its mapping is extended (``mremap``: pages move,
  nothing is copied, the old and new rings never coexist) and the live positions whose bit
  ``capacity`` is set move from slot ``s`` to ``s + capacity`` in the new upper half, which no
  live entry occupies.
"""
from libcpp.vector cimport vector
from libc.stdlib cimport abort
from libc.stdint cimport uint32_t, uint64_t, int64_t
from skype._core.types cimport sid_t, seq_t, ext_id_t, MsgTermC
from skype._core.hugepages cimport (huge_alloc, huge_resize, huge_free, advise_huge, release_pages,
                                    small_pages_alloc, small_pages_resize)
from skype._core.window cimport (win_next_seq, win_get, win_id_hash, NO_HOLDER, NO_ID_SLOT,
                                 XCHUNK)

cdef enum:
    INITIAL_RING = 1024
    INITIAL_TERMS = 16384
    INITIAL_HOLDERS = 16384
    INITIAL_XPOOL = 16384       # words of the extra-holder pool at first
    PAGE_SHIFT = 10             # a pool page: 1,024 words (4 KB), 64 chunks

cdef uint32_t NO_SLOT = NO_ID_SLOT

# The extra lists a bulk registration fills (tens of holders for every window message) are
# freed as their messages expire, in arrival order, while their chunks were handed out in the
# registration's order: a pool page empties only when all its chunks' messages have left.
# Every SWEEP_AFTER bytes of freed chunks, the pool's empty pages go back to the OS, so the
# turnover that follows a registration does not hold the lists' memory beside the growing
# holder ring.
cdef uint64_t SWEEP_AFTER = 32 << 20
cdef uint64_t page_sweeps = 0       # process-wide


def extra_list_trims():
    """How many times freed extra-holder chunks gave the pool's empty pages back (process-wide)."""
    return page_sweeps


def set_extra_sweep_bytes(uint64_t nbytes):
    """Sweep the extra-holder pools' empty pages every ``nbytes`` of freed chunks (process-wide;
    32 MB by default; a test hook: a few bytes sweep after every expiry that frees a chunk)."""
    global SWEEP_AFTER
    SWEEP_AFTER = nbytes


cdef class WindowStore:
    def __cinit__(self):
        self.ring.resize(INITIAL_RING)
        self.extra_of.resize(INITIAL_RING, 0)
        self.extra_end.resize(INITIAL_RING, 0)
        self.xpool = <uint32_t*>small_pages_alloc(INITIAL_XPOOL * sizeof(uint32_t))
        if self.xpool == NULL:
            raise MemoryError("the window's extra-holder pool")
        self.xpool_cap = INITIAL_XPOOL
        self.xpool_top = XCHUNK             # chunk 0 is never used: 0 means "no chunk"
        self.xfree = 0
        self.xlive = 0
        self.xfreed = 0
        self.page_live.assign(1, 0)
        self.page_out.assign(1, 0)
        self.found_upto = 0
        self.term_ring.resize(INITIAL_TERMS)
        self.hold_ring = <sid_t*>huge_alloc(INITIAL_HOLDERS * sizeof(sid_t))
        if self.hold_ring == NULL:
            raise MemoryError("the window's holder ring")
        self.hold_cap = INITIAL_HOLDERS
        self.id_slots.resize(2 * INITIAL_RING, NO_SLOT)
        self.id_mask = 2 * INITIAL_RING - 1
        self.head = 0
        self.count = 0
        self.oldest_seq = 0
        self.term_head = 0
        self.term_tail = 0
        self.live_terms = 0
        self.term_wrapped = False
        self.term_wrap_seq = 0
        self.hold_head = 0
        self.hold_tail = 0

    def __dealloc__(self):
        huge_free(self.hold_ring, self.hold_cap * sizeof(sid_t))
        self.hold_ring = NULL
        huge_free(self.xpool, self.xpool_cap * sizeof(uint32_t))
        self.xpool = NULL

    # ------------------------------------------------------------------ duplicate detection
    cdef void _id_insert(self, uint32_t slot) noexcept nogil:
        cdef uint64_t i = win_id_hash(self.ring[slot].ext_id) & self.id_mask
        while self.id_slots[i] != NO_SLOT:
            i = (i + 1) & self.id_mask
        self.id_slots[i] = slot

    cdef void _id_erase(self, uint32_t slot) noexcept nogil:
        """Remove ring slot ``slot`` (still holding its message) from the set."""
        cdef uint64_t i = win_id_hash(self.ring[slot].ext_id) & self.id_mask, j, home
        while self.id_slots[i] != slot:
            i = (i + 1) & self.id_mask
        j = i
        while True:                 # backward shift: no entry may sit before its home slot's run
            j = (j + 1) & self.id_mask
            if self.id_slots[j] == NO_SLOT:
                break
            home = win_id_hash(self.ring[self.id_slots[j]].ext_id) & self.id_mask
            if ((j - home) & self.id_mask) >= ((j - i) & self.id_mask):
                self.id_slots[i] = self.id_slots[j]
                i = j
        self.id_slots[i] = NO_SLOT

    cdef bint _id_contains(self, int64_t ext_id) noexcept nogil:
        cdef uint64_t i = win_id_hash(ext_id) & self.id_mask
        while self.id_slots[i] != NO_SLOT:
            if self.ring[self.id_slots[i]].ext_id == ext_id:
                return True
            i = (i + 1) & self.id_mask
        return False

    cdef void _id_rebuild(self) noexcept nogil:
        cdef uint64_t i
        self.id_slots.assign(2 * self.ring.size(), NO_SLOT)
        self.id_mask = 2 * self.ring.size() - 1
        for i in range(self.count):
            self._id_insert(<uint32_t>((self.head + i) & (self.ring.size() - 1)))

    # ------------------------------------------------------------------ holders
    cdef void add_holder(self, seq_t seq, sid_t sid) noexcept nogil:
        """Register sid as a holder of seq (a window message)."""
        cdef MsgC* m
        cdef uint64_t slot
        cdef uint32_t end, c
        if seq < self.found_upto:
            return                  # kept nowhere: found at its expiry (engine.pyx)
        if seq + 1 != win_next_seq(self):
            slot = (self.head + (seq - self.oldest_seq)) & (self.ring.size() - 1)
            end = self.extra_end[slot]
            if self.extra_of[slot] == 0:
                c = self._take_chunk()
                self.extra_of[slot] = c
                end = c + 1
            elif (end & (XCHUNK - 1)) == 0:         # the last chunk is full: link a new one
                c = self._take_chunk()
                self.xpool[end - XCHUNK] = c
                end = c + 1
            self.xpool[end] = sid
            self.extra_end[slot] = end + 1
            return
        if self.hold_tail - self.hold_head == self.hold_cap:
            self._grow_holders()
        self.hold_ring[self.hold_tail & (self.hold_cap - 1)] = sid
        self.hold_tail += 1
        m = win_get(self, seq)
        m.hold_n += 1

    cdef void drop_holder_of(self, seq_t seq, sid_t sid) noexcept nogil:
        """Clear the first live entry of sid among seq's holders (its FIFO block, then its extra
        chunks; a buffer holds a message once, so with exact holders that is its only live
        entry).  Nothing when there is none (a message below ``found_upto``)."""
        cdef const MsgC* m = win_get(self, seq)
        cdef uint64_t pos, slot
        cdef uint32_t c, nxt, lim, i
        for pos in range(m.hold_pos, m.hold_pos + m.hold_n):
            if self.hold_ring[pos & (self.hold_cap - 1)] == sid:
                self.hold_ring[pos & (self.hold_cap - 1)] = NO_HOLDER
                return
        slot = (self.head + (seq - self.oldest_seq)) & (self.ring.size() - 1)
        c = self.extra_of[slot]
        while c:
            nxt = self.xpool[c]
            lim = self.extra_end[slot] if nxt == 0 else c + XCHUNK
            for i in range(c + 1, lim):
                if self.xpool[i] == sid:
                    self.xpool[i] = NO_HOLDER
                    return
            c = nxt

    cdef void _grow_holders(self) noexcept nogil:
        """Double the (full) holder ring in place: the positions with bit ``cap`` set move up by
        ``cap``, the others keep their slot."""
        cdef uint64_t cap = self.hold_cap, pos
        cdef sid_t* ring = <sid_t*>huge_resize(self.hold_ring, cap * sizeof(sid_t), 2 * cap * sizeof(sid_t))
        if ring == NULL:
            abort()                     # out of memory in a nogil path (as std::vector would)
        for pos in range(self.hold_head, self.hold_tail):
            if pos & cap:
                ring[(pos & (cap - 1)) + cap] = ring[pos & (cap - 1)]
        self.hold_ring = ring
        self.hold_cap = 2 * cap

    cdef uint32_t _take_chunk(self) noexcept nogil:
        """A chunk of the extra-holder pool (its link word 0): a freed one, else a new one."""
        cdef uint32_t c
        cdef uint64_t page
        cdef uint32_t* pool
        if self.xfree:
            c = self.xfree
            self.xfree = self.xpool[c]
        else:
            if self.xpool_top + XCHUNK > self.xpool_cap:
                if 2 * self.xpool_cap > (<uint64_t>1 << 31):
                    abort()             # handles name words below 2^31 (an 8-GB pool)
                pool = <uint32_t*>small_pages_resize(self.xpool, self.xpool_cap * sizeof(uint32_t),
                                                     2 * self.xpool_cap * sizeof(uint32_t))
                if pool == NULL:
                    abort()             # out of memory in a nogil path (as std::vector would)
                self.xpool = pool
                self.xpool_cap *= 2
            c = <uint32_t>self.xpool_top
            self.xpool_top += XCHUNK
            if (self.xpool_top >> PAGE_SHIFT) >= self.page_live.size():
                self.page_live.push_back(0)
                self.page_out.push_back(0)
        page = c >> PAGE_SHIFT
        self.page_live[page] += 1
        self.page_out[page] = 0
        self.xpool[c] = 0
        self.xlive += 1
        return c

    cdef void _give_chunks(self, uint32_t c) noexcept nogil:
        """The chain of chunks from ``c`` back to the free list; every SWEEP_AFTER bytes freed,
        the empty pages go back to the OS."""
        cdef uint32_t nxt
        while c:
            nxt = self.xpool[c]
            self.xpool[c] = self.xfree
            self.xfree = c
            self.page_live[c >> PAGE_SHIFT] -= 1
            self.xlive -= 1
            self.xfreed += 1
            c = nxt
        if self.xfreed * XCHUNK * sizeof(uint32_t) >= SWEEP_AFTER:
            self._sweep_pages()

    cdef void _sweep_pages(self) noexcept nogil:
        """Hand the pool's pages that hold no chunk in use back to the OS, runs at a time (their
        free chunks stay on the free list and read as zeros until reused)."""
        global page_sweeps
        cdef uint64_t p = 0, q, n = self.page_live.size()
        while p < n:
            if self.page_live[p] or self.page_out[p]:
                p += 1
                continue
            q = p
            while q < n and self.page_live[q] == 0 and not self.page_out[q]:
                self.page_out[q] = 1
                q += 1
            release_pages(self.xpool + (p << PAGE_SHIFT), (q - p) << (PAGE_SHIFT + 2))
            p = q
        self.xfreed = 0
        page_sweeps += 1

    # ------------------------------------------------------------------ rings
    cdef void _grow_ring(self) noexcept nogil:
        cdef uint64_t cap = self.ring.size(), i
        cdef vector[MsgC] ring
        cdef vector[uint32_t] extra_of
        cdef vector[uint32_t] extra_end
        ring.resize(cap * 2)
        extra_of.resize(cap * 2, 0)
        extra_end.resize(cap * 2, 0)
        for i in range(self.count):
            ring[i] = self.ring[(self.head + i) & (cap - 1)]
            extra_of[i] = self.extra_of[(self.head + i) & (cap - 1)]
            extra_end[i] = self.extra_end[(self.head + i) & (cap - 1)]
        self.ring.swap(ring)
        self.extra_of.swap(extra_of)
        self.extra_end.swap(extra_end)
        self.head = 0
        self._id_rebuild()
        advise_huge(self.ring.data(), self.ring.size() * sizeof(MsgC))
        advise_huge(self.id_slots.data(), self.id_slots.size() * sizeof(uint32_t))

    cdef void _relayout_terms(self, uint64_t need) noexcept nogil:
        """Copy the live term blocks compactly to the start of a ring with room for ``need``
        more terms and an eighth of headroom."""
        cdef uint64_t cap = self.term_ring.size(), want = self.live_terms + need, i, j, pos = 0
        cdef vector[MsgTermC] ring
        cdef MsgC* m
        if want + want // 8 + 1024 > cap:
            cap = want + want // 8 + 1024
        ring.resize(cap)
        for i in range(self.count):
            m = &self.ring[(self.head + i) & (self.ring.size() - 1)]
            for j in range(m.nterms):
                ring[pos + j] = self.term_ring[m.term_pos + j]
            m.term_pos = pos
            pos += m.nterms
        self.term_ring.swap(ring)
        advise_huge(self.term_ring.data(), self.term_ring.size() * sizeof(MsgTermC))
        self.term_head = 0
        self.term_tail = pos
        self.term_wrapped = False

    cdef uint64_t _term_room(self, uint64_t n) noexcept nogil:
        """The slot where the next message's ``n`` terms go (relaying out the ring if no free
        run is long enough)."""
        cdef uint64_t cap = self.term_ring.size()
        if self.count == 0:
            self.term_head = 0
            self.term_tail = 0
            self.term_wrapped = False
            if n <= cap:
                return 0
        elif not self.term_wrapped:
            if self.term_tail + n <= cap:
                return self.term_tail
            if n <= self.term_head:
                self.term_wrapped = True
                self.term_wrap_seq = self.oldest_seq + self.count
                return 0
        elif self.term_tail + n <= self.term_head:
            return self.term_tail
        self._relayout_terms(n)
        return self.term_tail

    cdef seq_t append(self, ext_id_t ext_id, double x, double y, double t,
                      const MsgTermC* terms, uint32_t n) noexcept nogil:
        cdef uint64_t start, j, slot
        cdef MsgC* m
        if self.count == self.ring.size():
            self._grow_ring()
        start = self._term_room(n)
        for j in range(n):
            self.term_ring[start + j] = terms[j]
        self.term_tail = start + n
        self.live_terms += n
        slot = (self.head + self.count) & (self.ring.size() - 1)
        m = &self.ring[slot]
        m.seq = self.oldest_seq + self.count
        m.ext_id = ext_id
        m.x = x
        m.y = y
        m.t = t
        m.term_pos = start
        m.nterms = n
        m.hold_pos = self.hold_tail
        m.hold_n = 0
        self.extra_of[slot] = 0
        self.count += 1
        self._id_insert(<uint32_t>slot)
        return m.seq

    cdef void pop_oldest(self) noexcept nogil:
        cdef MsgC* m = &self.ring[self.head]
        cdef uint32_t e = self.extra_of[self.head]
        self._id_erase(<uint32_t>self.head)
        if e:                                       # its extra chunks back to the pool
            self._give_chunks(e)
            self.extra_of[self.head] = 0
        self.hold_head = m.hold_pos + m.hold_n
        self.live_terms -= m.nterms
        self.head = (self.head + 1) & (self.ring.size() - 1)
        self.count -= 1
        self.oldest_seq += 1
        if self.count == 0:
            self.term_head = self.term_tail
            self.term_wrapped = False
        else:
            self.term_head = self.ring[self.head].term_pos
            if self.term_wrapped and self.oldest_seq == self.term_wrap_seq:
                self.term_wrapped = False

    # ------------------------------------------------------------------ Python access
    def __len__(self):
        return self.count

    def contains_ids(self, const int64_t[::1] ids):
        import numpy as np
        out = np.zeros(ids.shape[0], dtype=bool)
        cdef Py_ssize_t i
        for i in range(ids.shape[0]):
            out[i] = self._id_contains(ids[i])
        return out

    def ext_ids(self):
        """External ids of the window's messages, oldest first."""
        import numpy as np
        out = np.empty(self.count, dtype=np.int64)
        cdef int64_t[::1] o = out
        cdef uint64_t i
        for i in range(self.count):
            o[i] = self.ring[(self.head + i) & (self.ring.size() - 1)].ext_id
        return out

    def term_rows(self):
        """(term ids, weights) of each window message, oldest first (a test hook)."""
        import numpy as np
        out = []
        cdef uint64_t i, j
        cdef MsgC* m
        for i in range(self.count):
            m = &self.ring[(self.head + i) & (self.ring.size() - 1)]
            ids = np.empty(m.nterms, dtype=np.int64)
            w = np.empty(m.nterms, dtype=np.float64)
            for j in range(m.nterms):
                ids[j] = self.term_ring[m.term_pos + j].term
                w[j] = self.term_ring[m.term_pos + j].w
            out.append((ids, w))
        return out

    def memory_parts(self):
        """Bytes by component: message records, term ring, holder ring, extra holder lists (the
        pool's pages not handed back, the per-slot chunk and end words, the page tables),
        duplicate-detection set."""
        cdef uint64_t extra = (self.extra_of.capacity() + self.extra_end.capacity()) * sizeof(uint32_t)
        cdef size_t p
        extra += self.page_live.capacity() * sizeof(uint16_t) + self.page_out.capacity()
        for p in range(self.page_live.size()):
            if not self.page_out[p] and (p << PAGE_SHIFT) < self.xpool_top:
                extra += sizeof(uint32_t) << PAGE_SHIFT
        return {"messages": self.ring.capacity() * sizeof(MsgC),
                "terms": self.term_ring.capacity() * sizeof(MsgTermC),
                "holders": self.hold_cap * sizeof(sid_t),
                "extra_holders": extra,
                "ids": self.id_slots.capacity() * sizeof(uint32_t)}

    def memory_bytes(self):
        return sum(self.memory_parts().values())

    def check_invariants(self):
        """Test hook: every live term block lies inside the ring, the live blocks follow each
        other in arrival order (wrapping at most once), and the id set holds each slot once."""
        cdef uint64_t i, slot, cap = self.term_ring.size(), prev_end = 0, wraps = 0, found = 0
        cdef MsgC* m
        cdef uint64_t terms = 0
        for i in range(self.count):
            slot = (self.head + i) & (self.ring.size() - 1)
            m = &self.ring[slot]
            assert m.seq == self.oldest_seq + i
            assert m.term_pos + m.nterms <= cap
            if i and m.term_pos < prev_end:
                wraps += 1
                assert m.term_pos == 0
            prev_end = m.term_pos + m.nterms
            terms += m.nterms
            assert self._id_contains(m.ext_id)
        assert wraps <= 1 and (wraps == 1) == bool(self.term_wrapped and self.count)
        assert terms == self.live_terms
        for i in range(self.id_slots.size()):
            if self.id_slots[i] != NO_SLOT:
                found += 1
        assert found == self.count
