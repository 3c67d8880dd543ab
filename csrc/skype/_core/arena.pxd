# Entry arena: every result buffer's entries in fixed-capacity slots of a few size classes, each
# class dense (a slot given back is filled by the class's last slot, see arena.pyx).
from libcpp.vector cimport vector
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove


cdef packed struct BufEntryC:    # one buffered message, as a rebuild stages it (18 bytes); a
    double score                 # slot stores the fields as columns instead (EntryCols)
    uint32_t seq_lo              # low 32 bits of the message's seq (window span < 2^31)
    uint32_t hold                # its reverse-map entry (window.add_holder's handle)
    uint16_t dc                  # dominance counter: newer buffered messages scoring >= it (< k)


cdef enum:
    ENTRY_BYTES = 18             # an entry's bytes in a slot: score 8, seq 4, hold 4, dc 2


cdef struct EntryCols:           # one slot's entries, struct-of-arrays: a slot of cap entries holds
    double* score                # cap scores, then cap seqs, cap holder handles and cap dominance
    uint32_t* seq                # counters, so a search reads only the scores' lines and an
    uint32_t* hold               # expiry's only the seqs'
    uint16_t* dc


cdef inline EntryCols cols_at(char* base, uint32_t cap) noexcept nogil:
    cdef EntryCols c
    c.score = <double*>base
    c.seq = <uint32_t*>(base + <size_t>cap * 8)
    c.hold = c.seq + cap
    c.dc = <uint16_t*>(c.hold + cap)
    return c


cdef inline size_t slot_stride(uint32_t cap) noexcept nogil:
    """A slot's bytes: its columns, rounded up to 8 so that every slot's scores stay aligned."""
    return (<size_t>cap * ENTRY_BYTES + 7) & ~(<size_t>7)


cdef inline void cols_move(EntryCols c, size_t dst, size_t src, size_t n) noexcept nogil:
    """Move entries [src, src + n) to [dst, dst + n) inside one slot (ranges may overlap)."""
    if n:
        memmove(c.score + dst, c.score + src, n * 8)
        memmove(c.seq + dst, c.seq + src, n * 4)
        memmove(c.hold + dst, c.hold + src, n * 4)
        memmove(c.dc + dst, c.dc + src, n * 2)


cdef inline void cols_copy(EntryCols d, EntryCols s, size_t n) noexcept nogil:
    """Copy the first n entries of slot s into slot d (two slots)."""
    if n:
        memcpy(d.score, s.score, n * 8)
        memcpy(d.seq, s.seq, n * 4)
        memcpy(d.hold, s.hold, n * 4)
        memcpy(d.dc, s.dc, n * 2)


cdef inline void cols_set(EntryCols c, size_t i, double score, uint32_t seq_lo, uint32_t hold,
                          uint16_t dc) noexcept nogil:
    c.score[i] = score
    c.seq[i] = seq_lo
    c.hold[i] = hold
    c.dc[i] = dc


cdef struct SlotC:               # where one buffer's entries live (8 bytes)
    uint32_t index               # slot number within its class
    uint16_t cls                 # size class; NO_SLOT: no slot (zero-initialised records)
    uint16_t pad


cdef enum:
    NO_SLOT = 0                  # class 0 is never handed out
    NO_OWNER = 0xFFFFFFFF        # give(): no other slot moved
    PAGE_BYTES = 1 << 18         # a page holds a power-of-two number of slots of about this size
    HUGE_BYTES = 1 << 21         # ... or, in a large class, a 2 MB page (transparent huge page)


cdef class EntryArena:
    cdef vector[uint32_t] cap                  # per class: entries per slot
    cdef vector[uint32_t] stride               # per class: bytes per slot (slot_stride)
    cdef vector[uint32_t] page_shift           # per class: log2(slots per page) (small pages)
    cdef vector[uint32_t] per_page             # per class: slots per page (huge pages: as many as fit)
    cdef vector[vector[char*]] pages              # per class: its pages (never moved or freed early)
    cdef vector[vector[uint32_t]] owner        # per class, per live slot: its owner (a buffer's sid)
    cdef vector[uint32_t] handed               # per class: live slots (they are slots 0 .. handed - 1)
    cdef vector[uint8_t] huge                  # per class: its pages are 2 MB huge pages
    cdef uint32_t huge_after                   # small pages a class fills before it moves to huge ones
    cdef uint64_t live_slots
    cdef uint64_t live_bytes                   # bytes of the slots handed out and not given back
    cdef uint64_t page_bytes

    cdef uint16_t class_for(self, size_t n) noexcept nogil
    cdef SlotC take(self, uint16_t cls, uint32_t owner) noexcept nogil
    cdef uint32_t give(self, SlotC slot) noexcept nogil
    cdef char* _at(self, uint16_t cls, uint32_t index) noexcept nogil
    cdef size_t _page_bytes(self, uint16_t cls) noexcept nogil
    cdef void _go_huge(self, uint16_t cls) noexcept nogil
    cdef size_t _page_of(self, uint16_t cls, uint32_t index) noexcept nogil


cdef inline char* slot_base(EntryArena a, SlotC slot) noexcept nogil:
    """The first byte of a slot (NULL for NO_SLOT)."""
    cdef uint32_t shift, per, page
    if slot.cls == NO_SLOT:
        return NULL
    if a.huge[slot.cls]:                # a 2 MB page holds as many slots as fit (one division)
        per = a.per_page[slot.cls]
        page = slot.index // per
        return a.pages[slot.cls][page] + <size_t>(slot.index - page * per) * a.stride[slot.cls]
    shift = a.page_shift[slot.cls]
    return a.pages[slot.cls][slot.index >> shift] + <size_t>(slot.index & ((1u << shift) - 1)) * a.stride[slot.cls]


cdef inline EntryCols slot_cols(EntryArena a, SlotC slot) noexcept nogil:
    """A slot's columns (NULL pointers for NO_SLOT)."""
    cdef EntryCols c
    if slot.cls == NO_SLOT:
        c.score = NULL
        c.seq = NULL
        c.hold = NULL
        c.dc = NULL
        return c
    return cols_at(slot_base(a, slot), a.cap[slot.cls])
