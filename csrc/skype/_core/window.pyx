# cython: language_level=3
"""Window store: a FIFO ring of the messages in the sliding window.

Invariants:
* The window holds the dense run of arrival numbers ``oldest_seq .. oldest_seq + count - 1``;
  ``get(seq)`` is O(1) for any seq in that run.  Messages leave in arrival order only.
* Each message's terms (ascending ids) and unit weights sit contiguously in the term ring: when
  a block would wrap past the end of the ring, the tail skips to the ring's start (the skipped
  tail is dead space), so kernels always get plain pointers.
* The reverse map of spec §2 (which subscriptions hold a message in their result buffer) has
  two parts.  Admissions on arrival happen while the message is the newest, so they append to a
  FIFO holder ring: each message owns the block ``[hold_pos, hold_pos + hold_n)``, and blocks
  leave with their messages.  Holders added later (re-evaluations re-admit older messages) go to
  a small per-message ``extra`` list.  ``add_holder`` returns a handle to the entry, and the
  buffer stores it beside the message: when the buffer drops the message (eviction, a
  re-evaluation, the subscription's removal) ``drop_holder`` overwrites the entry with
  NO_HOLDER, so the live entries of a message are exactly the buffers holding it (buffers.pyx).
  Handles: the low 31 bits of a ring position (the ring's live span stays below 2^31 entries),
  or HOLD_EXTRA | the index in the extra list (which only grows while its message lives).
* Rings double when full; positions are absolute (a ring slot is ``pos & (capacity - 1)``), so
  growth copies each live slot to its new slot and nothing is rebased (terms are re-laid out
  compactly because their blocks must stay contiguous).
"""
from libcpp.vector cimport vector
from libc.stdint cimport uint32_t, uint64_t, int64_t
from skype._core.types cimport sid_t, seq_t, ext_id_t, MsgTermC
from skype._core.window cimport win_next_seq, win_get, win_extra_holders, NO_HOLDER, HOLD_EXTRA, HOLD_MASK

cdef enum:
    INITIAL_RING = 1024
    INITIAL_TERMS = 16384
    INITIAL_HOLDERS = 16384


cdef class WindowStore:
    def __cinit__(self):
        self.ring.resize(INITIAL_RING)
        self.extra.resize(INITIAL_RING)
        self.term_ring.resize(INITIAL_TERMS)
        self.hold_ring.resize(INITIAL_HOLDERS)
        self.head = 0
        self.count = 0
        self.oldest_seq = 0
        self.term_head = 0
        self.term_tail = 0
        self.hold_head = 0
        self.hold_tail = 0

    cdef uint32_t add_holder(self, seq_t seq, sid_t sid) noexcept nogil:
        """Register sid as a holder of seq (a window message); returns the entry's handle."""
        cdef MsgC* m
        cdef vector[sid_t]* extra
        if seq + 1 != win_next_seq(self):
            extra = win_extra_holders(self, seq)
            extra.push_back(sid)
            return HOLD_EXTRA | <uint32_t>(extra.size() - 1)
        if self.hold_tail - self.hold_head == self.hold_ring.size():
            self._grow_holders()
        self.hold_ring[self.hold_tail & (self.hold_ring.size() - 1)] = sid
        self.hold_tail += 1
        m = win_get(self, seq)
        m.hold_n += 1
        return <uint32_t>((self.hold_tail - 1) & HOLD_MASK)

    cdef void drop_holder(self, seq_t seq, uint32_t handle) noexcept nogil:
        """The holder entry ``handle`` of seq (a window message) no longer holds it."""
        cdef uint64_t pos
        if handle & HOLD_EXTRA:
            win_extra_holders(self, seq)[0][handle & HOLD_MASK] = NO_HOLDER
            return
        # the newest ring position whose low 31 bits are the handle's (the entry is live, so
        # within 2^31 of the tail)
        pos = self.hold_tail - 1 - (((self.hold_tail - 1) - handle) & HOLD_MASK)
        self.hold_ring[pos & (self.hold_ring.size() - 1)] = NO_HOLDER

    cdef void _grow_holders(self) noexcept nogil:
        cdef uint64_t cap = self.hold_ring.size(), pos
        cdef vector[sid_t] ring
        ring.resize(cap * 2)
        for pos in range(self.hold_head, self.hold_tail):
            ring[pos & (2 * cap - 1)] = self.hold_ring[pos & (cap - 1)]
        self.hold_ring.swap(ring)

    cdef void _grow_ring(self) noexcept nogil:
        cdef uint64_t cap = self.ring.size(), i
        cdef vector[MsgC] ring
        cdef vector[vector[sid_t]] extra
        ring.resize(cap * 2)
        extra.resize(cap * 2)
        for i in range(self.count):
            ring[i] = self.ring[(self.head + i) & (cap - 1)]
            extra[i].swap(self.extra[(self.head + i) & (cap - 1)])
        self.ring.swap(ring)
        self.extra.swap(extra)
        self.head = 0

    cdef void _relayout_terms(self, uint64_t need) noexcept nogil:
        """Copy live term blocks compactly into a ring with room for ``need`` more terms."""
        cdef uint64_t cap = self.term_ring.size(), live = self.term_tail - self.term_head
        cdef uint64_t new_cap = cap, i, j, pos = 0
        cdef vector[MsgTermC] ring
        cdef MsgC* m
        while new_cap < (5 * (live + need)) // 4 + 64:   # a quarter of headroom for wraps
            new_cap *= 2
        ring.resize(new_cap)
        for i in range(self.count):
            m = &self.ring[(self.head + i) & (self.ring.size() - 1)]
            for j in range(m.nterms):
                ring[pos + j] = self.term_ring[(m.term_pos + j) & (cap - 1)]
            m.term_pos = pos
            pos += m.nterms
        self.term_ring.swap(ring)
        self.term_head = 0
        self.term_tail = pos

    cdef seq_t append(self, ext_id_t ext_id, double x, double y, double t,
                      const MsgTermC* terms, uint32_t n) noexcept nogil:
        cdef uint64_t cap, start, j
        cdef MsgC* m
        if self.count == self.ring.size():
            self._grow_ring()
        cap = self.term_ring.size()
        start = self.term_tail
        if (start & (cap - 1)) + n > cap:          # would wrap: skip to the ring's start
            start = (start | (cap - 1)) + 1
        if start + n - self.term_head > cap:
            self._relayout_terms(n)
            cap = self.term_ring.size()
            start = self.term_tail
        for j in range(n):
            self.term_ring[(start + j) & (cap - 1)] = terms[j]
        self.term_tail = start + n
        m = &self.ring[(self.head + self.count) & (self.ring.size() - 1)]
        m.seq = self.oldest_seq + self.count
        m.ext_id = ext_id
        m.x = x
        m.y = y
        m.t = t
        m.term_pos = start
        m.nterms = n
        m.hold_pos = self.hold_tail
        m.hold_n = 0
        self.extra[(self.head + self.count) & (self.ring.size() - 1)].clear()
        self.count += 1
        self.ids.insert(ext_id)
        return m.seq

    cdef void pop_oldest(self) noexcept nogil:
        cdef MsgC* m = &self.ring[self.head]
        cdef vector[sid_t] empty
        self.ids.erase(m.ext_id)
        self.extra[self.head].swap(empty)          # release the memory
        self.hold_head = m.hold_pos + m.hold_n
        self.head = (self.head + 1) & (self.ring.size() - 1)
        self.count -= 1
        self.oldest_seq += 1
        if self.count == 0:
            self.term_head = self.term_tail
        else:
            self.term_head = self.ring[self.head].term_pos

    # ------------------------------------------------------------------ Python access
    def __len__(self):
        return self.count

    def contains_ids(self, const int64_t[::1] ids):
        import numpy as np
        out = np.zeros(ids.shape[0], dtype=bool)
        cdef Py_ssize_t i
        for i in range(ids.shape[0]):
            out[i] = self.ids.count(ids[i]) > 0
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

    def memory_bytes(self):
        cdef uint64_t total = (self.ring.capacity() * (sizeof(MsgC) + 24) + self.term_ring.capacity() * sizeof(MsgTermC)
                               + self.hold_ring.capacity() * sizeof(sid_t))
        cdef uint64_t i
        for i in range(self.extra.size()):
            total += self.extra[i].capacity() * sizeof(sid_t)
        return total + self.ids.size() * 32
