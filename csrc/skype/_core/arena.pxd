# Entry arena: every result buffer's entries in fixed-capacity slots of a few size classes, each
# class dense (a slot given back is filled by the class's last slot, see arena.pyx).
from libcpp.vector cimport vector
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t


cdef packed struct BufEntryC:    # one buffered message (14 bytes); its reverse-map entry is found
    double score                 # by (message, sid) when the buffer drops it (window.drop_holder_of)
    uint32_t seq_lo              # low 32 bits of the message's seq (window span < 2^31)
    uint16_t dc                  # dominance counter: newer buffered messages scoring >= it (< k)


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
    cdef vector[uint32_t] page_shift           # per class: log2(slots per page) (small pages)
    cdef vector[uint32_t] per_page             # per class: slots per page (huge pages: as many as fit)
    cdef vector[vector[BufEntryC*]] pages      # per class: its pages (never moved or freed early)
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
    cdef BufEntryC* _at(self, uint16_t cls, uint32_t index) noexcept nogil
    cdef size_t _page_bytes(self, uint16_t cls) noexcept nogil
    cdef void _go_huge(self, uint16_t cls) noexcept nogil
    cdef size_t _page_of(self, uint16_t cls, uint32_t index) noexcept nogil


cdef inline BufEntryC* slot_entries(EntryArena a, SlotC slot) noexcept nogil:
    """The first entry of a slot (NULL for NO_SLOT)."""
    cdef uint32_t shift, per, page
    if slot.cls == NO_SLOT:
        return NULL
    if a.huge[slot.cls]:                # a 2 MB page holds as many slots as fit (one division)
        per = a.per_page[slot.cls]
        page = slot.index // per
        return a.pages[slot.cls][page] + <size_t>(slot.index - page * per) * a.cap[slot.cls]
    shift = a.page_shift[slot.cls]
    return a.pages[slot.cls][slot.index >> shift] + <size_t>(slot.index & ((1u << shift) - 1)) * a.cap[slot.cls]
