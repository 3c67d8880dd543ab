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
  leave with their messages.  Holders added later (re-evaluations re-admit older messages) go to
  a per-message ``extra`` list, allocated only for messages that get one (``extra_of`` maps a ring
  slot to its list, 0 for none; the lists live at stable addresses and are recycled).
  ``add_holder`` returns a handle to the entry, and the
  buffer stores it beside the message: when the buffer drops the message (eviction, a
  re-evaluation, the subscription's removal) ``drop_holder`` overwrites the entry with
  NO_HOLDER, so the live entries of a message are exactly the buffers holding it (buffers.pyx).
  A caller that keeps no handle clears its entry by (message, sid) instead (``drop_holder_of``:
  a scan of the message's block and extra list; the result buffers do this, bufstore.pyx).
  Handles: the low 31 bits of a ring position (the ring's live span stays below 2^31 entries),
  or HOLD_EXTRA | the index in the extra list (which only grows while its message lives).
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
from skype._core.hugepages cimport huge_alloc, huge_resize, huge_free, advise_huge
from skype._core.window cimport (win_next_seq, win_get, win_id_hash, win_extra_holders, NO_HOLDER, HOLD_EXTRA,
                                 HOLD_MASK, NO_ID_SLOT)

cdef enum:
    INITIAL_RING = 1024
    INITIAL_TERMS = 16384
    INITIAL_HOLDERS = 16384
    KEEP_EXTRA = 16             # a recycled extra list keeps at most this many entries' storage

cdef uint32_t NO_SLOT = NO_ID_SLOT

# The extra lists a bulk registration fills (tens of holders for every window message) are
# freed one small block at a time as their messages expire: malloc keeps the pages, so the
# turnover that follows a registration held the lists' memory and the holder ring's at once
# (the 1M run's peak).  Every TRIM_AFTER bytes of released lists, the heap's free pages go
# back to the OS (glibc's malloc_trim; elsewhere nothing).  Process-wide, as the heap is.
cdef extern from *:
    """
    #if defined(__GLIBC__)
    #include <malloc.h>
    static inline void skype_trim_heap(void) { malloc_trim(0); }
    #else
    static inline void skype_trim_heap(void) {}
    #endif
    """
    void skype_trim_heap() noexcept nogil

cdef uint64_t TRIM_AFTER = 32 << 20
cdef uint64_t released_bytes = 0     # extra-list bytes released since the last trim
cdef uint64_t heap_trims = 0


def extra_list_trims():
    """How many times released extra lists gave the heap's free pages back (process-wide)."""
    return heap_trims


cdef inline void _note_released(uint64_t nbytes) noexcept nogil:
    global released_bytes, heap_trims
    released_bytes += nbytes
    if released_bytes >= TRIM_AFTER:
        released_bytes = 0
        heap_trims += 1
        skype_trim_heap()


cdef class WindowStore:
    def __cinit__(self):
        self.ring.resize(INITIAL_RING)
        self.extra_of.resize(INITIAL_RING, 0)
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
        cdef size_t i
        for i in range(self.extra_pool.size()):
            del self.extra_pool[i]
        huge_free(self.hold_ring, self.hold_cap * sizeof(sid_t))
        self.hold_ring = NULL

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
    cdef uint32_t add_holder(self, seq_t seq, sid_t sid) noexcept nogil:
        """Register sid as a holder of seq (a window message); returns the entry's handle."""
        cdef MsgC* m
        cdef vector[sid_t]* extra
        cdef uint64_t slot
        if seq + 1 != win_next_seq(self):
            slot = (self.head + (seq - self.oldest_seq)) & (self.ring.size() - 1)
            if self.extra_of[slot] == 0:
                if self.extra_free.size():
                    self.extra_of[slot] = self.extra_free.back() + 1
                    self.extra_free.pop_back()
                else:
                    self.extra_pool.push_back(new vector[sid_t]())
                    self.extra_of[slot] = <uint32_t>self.extra_pool.size()
            extra = self.extra_pool[self.extra_of[slot] - 1]
            if extra.size() == extra.capacity():    # grow by a quarter, not double (bulk
                extra.reserve(extra.size() + (extra.size() >> 2) + 2)   # registration: ~40 a list)
            extra.push_back(sid)
            return HOLD_EXTRA | <uint32_t>(extra.size() - 1)
        if self.hold_tail - self.hold_head == self.hold_cap:
            self._grow_holders()
        self.hold_ring[self.hold_tail & (self.hold_cap - 1)] = sid
        self.hold_tail += 1
        m = win_get(self, seq)
        m.hold_n += 1
        return <uint32_t>((self.hold_tail - 1) & HOLD_MASK)

    cdef void drop_holder(self, seq_t seq, uint32_t handle) noexcept nogil:
        """The holder entry ``handle`` of seq (a window message) no longer holds it."""
        cdef uint64_t pos
        cdef uint64_t slot
        if handle & HOLD_EXTRA:
            slot = (self.head + (seq - self.oldest_seq)) & (self.ring.size() - 1)
            self.extra_pool[self.extra_of[slot] - 1][0][handle & HOLD_MASK] = NO_HOLDER
            return
        # the newest ring position whose low 31 bits are the handle's (the entry is live, so
        # within 2^31 of the tail)
        pos = self.hold_tail - 1 - (((self.hold_tail - 1) - handle) & HOLD_MASK)
        self.hold_ring[pos & (self.hold_cap - 1)] = NO_HOLDER

    cdef void drop_holder_of(self, seq_t seq, sid_t sid) noexcept nogil:
        """drop_holder without a handle: clear the first live entry of sid among seq's holders
        (its FIFO block, then its extra list; a buffer holds a message once, so with exact
        holders that is its only live entry).  Nothing when there is none."""
        cdef const MsgC* m = win_get(self, seq)
        cdef uint64_t pos
        cdef vector[sid_t]* extra
        cdef size_t i
        for pos in range(m.hold_pos, m.hold_pos + m.hold_n):
            if self.hold_ring[pos & (self.hold_cap - 1)] == sid:
                self.hold_ring[pos & (self.hold_cap - 1)] = NO_HOLDER
                return
        extra = win_extra_holders(self, seq)
        for i in range(extra.size()):
            if extra[0][i] == sid:
                extra[0][i] = NO_HOLDER
                return

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

    # ------------------------------------------------------------------ rings
    cdef void _grow_ring(self) noexcept nogil:
        cdef uint64_t cap = self.ring.size(), i
        cdef vector[MsgC] ring
        cdef vector[uint32_t] extra_of
        ring.resize(cap * 2)
        extra_of.resize(cap * 2, 0)
        for i in range(self.count):
            ring[i] = self.ring[(self.head + i) & (cap - 1)]
            extra_of[i] = self.extra_of[(self.head + i) & (cap - 1)]
        self.ring.swap(ring)
        self.extra_of.swap(extra_of)
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
        cdef vector[sid_t] empty
        self._id_erase(<uint32_t>self.head)
        if e:                                       # recycle its extra list
            if self.extra_pool[e - 1].capacity() > KEEP_EXTRA:
                _note_released(self.extra_pool[e - 1].capacity() * sizeof(sid_t))
                self.extra_pool[e - 1].swap(empty)  # release the memory
            self.extra_pool[e - 1].clear()
            self.extra_free.push_back(e - 1)
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
        """Bytes by component: message records, term ring, holder ring, extra holder lists,
        duplicate-detection set."""
        cdef uint64_t extra = self.extra_of.capacity() * sizeof(uint32_t) + self.extra_pool.capacity() * 8
        cdef size_t i
        for i in range(self.extra_pool.size()):
            extra += 24 + self.extra_pool[i].capacity() * sizeof(sid_t)
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
